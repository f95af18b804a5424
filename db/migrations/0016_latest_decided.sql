-- The latest marker is decided at write and by the housekeeping tick, and only read elsewhere
-- (db.capabilities.refresh_latest, latest_in_force): it marks exactly the latest in-force version
-- of each skill, so readers no longer need the moment a marked row could stop being latest, nor
-- the rows marked ahead of their effectiveAt. The runner re-derives every marker right after this
-- file (db.migrate), so rows marked by the old rule are unmarked.
ALTER TABLE capability_versions DROP COLUMN latest_until;
