-- An approval's requester is an identity: issuer, tenant and sub. Reading an approval as its
-- requester and collecting its ticket need the same issuer (a partner issuer's `sub` never stands
-- for a tenant's own principal). Approvals recorded before carry NULL and are read as capreg's own.
ALTER TABLE approvals ADD COLUMN requester_issuer text;
