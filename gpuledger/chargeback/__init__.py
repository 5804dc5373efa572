"""Chargeback and showback: each team's bill for a month, whose lines add up to the fleet's spend to the cent
under every rule for sharing capacity no team used (bill.py; docs/metrics.md, "Chargeback")."""
