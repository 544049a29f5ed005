"""What crosses the process boundary between the orchestrator and a trial process: the protocol
(versioned JSON lines, exit codes), the typed payload and result, the control server (orchestrator
end) and client (trial end). Stdlib only."""
