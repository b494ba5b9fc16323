"""What people read: a finding's report, its GitHub issue (and filing it), the campaign dashboard."""
