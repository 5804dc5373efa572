"""One module per CLI subcommand; see gpuledger/cli/main.py."""
