"""Operations: liveness, readiness, the JWKS, housekeeping."""
