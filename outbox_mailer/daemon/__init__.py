"""The daemon's row path and its machinery: claim, lanes, executor, gate, failover, recorder, rescuer."""
