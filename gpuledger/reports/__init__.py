"""Reports for people: the weekly report in its formats."""
