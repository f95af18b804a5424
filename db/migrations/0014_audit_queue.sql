-- Audited writes store their events here, durably, in the writing request's own transaction, and the
-- one sequencer step at a time (db.audit.chain_queued, under an advisory lock) moves them into their
-- tenants' hash chains in id order. Requests then never lock a chain's head row: across worker
-- processes and replicas they used to queue on it for the length of each other's commit
-- (docs/performance.md#audited-paths). `event` is the AuditEvent's JSON; `at` is when it was stored.
CREATE TABLE audit_queue (
    id bigserial PRIMARY KEY,
    at timestamptz NOT NULL,
    event text NOT NULL
);
