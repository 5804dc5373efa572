"""One module per CLI subcommand; see gpuledger/cli.py."""
