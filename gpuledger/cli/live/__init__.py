"""``gpuledger collect SOURCE``: one module per live source, each exposing ``add_collect_parser(sub)``."""
