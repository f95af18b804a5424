"""Offers: which capability, which version, which instance, now (ranked, weighed by risk and load)."""
