"""Budgets: spend per team, cluster or fleet against a budget per period, forecast to the period's end
(forecast.py: the methods and their back-test; status.py: each budget's figures). docs/metrics.md
("Budgets and forecasts") defines every figure."""
