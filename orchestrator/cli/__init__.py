"""The command line: argparse, dispatch, every text and --json shape (show/): the only printer."""
