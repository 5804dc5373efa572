"""Alerts: what crossed a line (a budget threshold, a jump in spend, a team's waste share, new capacity no
job held), each sent once by mail and webhook, with the state kept in the ledger (``alerts_sent``).
rules.py judges, deliver.py sends (the edge: SMTP and HTTP), and state.py remembers."""
