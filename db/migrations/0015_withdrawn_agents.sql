-- An agent withdrawn by its tenant (DELETE /v1/agents/{tenant}/{agentId}): its row and its versions
-- stay as history (every version retired), and every reader treats the agent as absent.
ALTER TABLE agents ADD COLUMN withdrawn_at timestamptz;
