"""audio models of the hub (see the open issues for what lands here)."""
