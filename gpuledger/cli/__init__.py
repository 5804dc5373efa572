"""The command line: argument parsing in main.py, one module per subcommand in commands/."""
