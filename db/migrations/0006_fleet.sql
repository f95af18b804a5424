-- Fleet: instance load and last-seen time on leases, and the hash of the last registration body
-- applied to an agent (an unchanged re-registration is answered by comparing it, without a write).
ALTER TABLE agent_instances ADD COLUMN load double precision CHECK (load >= 0 AND load <= 1);
ALTER TABLE agent_instances ADD COLUMN last_seen_at timestamptz NOT NULL DEFAULT now();
ALTER TABLE agents ADD COLUMN registration_hash text;
