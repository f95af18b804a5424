-- Signed cards (docs/api.md#signed-cards).
-- A tenant's publisher keys: a JWKS of public keys only (checked before it is stored). Once a
-- tenant has a row with keys, every registration in it must carry a valid publisher signature.
CREATE TABLE publisher_keys (
    tenant      text        PRIMARY KEY,
    jwks        jsonb       NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- The kid of the publisher signature that was verified on the agent's last applied registration;
-- NULL: never registered signed. Once set it stays set (no downgrade: every later registration
-- needs a valid signature).
ALTER TABLE agents ADD COLUMN publisher_kid text;
-- The last applied registration body, byte for byte as received (and as signed), for anyone with
-- the right to read it to re-verify the publisher's signature.
ALTER TABLE agents ADD COLUMN registration_body bytea;
