"""One module per CLI command, each with add_parser(subparsers) and run(args) -> exit code."""
