"""What happened and whether it was right: classification, checks, end-of-run logs."""
