"""Shrinking a finding's input: one definition of "simpler", a staged shrinker, the scenario stages."""
