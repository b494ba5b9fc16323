"""Test inputs and their results: scenarios, engine knobs, run results and costs, drives, policies, checkouts."""
