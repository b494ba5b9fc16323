"""What a test input and its results are: scenarios and the engine knob table, run results and costs,
the drive of a run's steps, split policies and candidate checkouts."""
