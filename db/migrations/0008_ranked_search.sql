-- Ranked search (docs/api.md#ranked-search): weighted full-text vectors over each capability
-- version, and a lexicon of the registry's own words for typo tolerance. Core PostgreSQL only (the
-- embedded server has no pg_trgm or fuzzystrmatch).

-- Punctuation becomes spaces first, so `invoice.lookup` is two words and not one host name token.
CREATE FUNCTION capreg_search_words(t text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN pg_catalog.regexp_replace(t, '[^[:alnum:]]+', ' ', 'g');

-- array_to_string is STABLE (element output functions in general may not be); text[] output is
-- immutable, so a generated column may use this wrapper.
CREATE FUNCTION capreg_join_words(t text[]) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN pg_catalog.array_to_string(t, ' ');

-- id and name weigh A, tags B, description C: a match of weight A or B is a match in id, name or
-- tags (the `:AB` restriction of the rank query).
ALTER TABLE capability_versions ADD COLUMN search_vector tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('english'::regconfig, capreg_search_words(skill_id || ' ' || name)), 'A')
    || setweight(to_tsvector('english'::regconfig, capreg_search_words(capreg_join_words(tags))), 'B')
    || setweight(to_tsvector('english'::regconfig, capreg_search_words(description)), 'C')
) STORED;
-- fastupdate off: a search never scans a pending list of recent inserts (the registry is read far
-- more than it is written; publishing pays the index update instead).
CREATE INDEX capability_versions_search ON capability_versions USING gin (search_vector) WITH (fastupdate = off);

-- A word and every string one deleted character away from it. Two words one typing error apart
-- (substitution, insertion, deletion, adjacent transposition) always share one of these, so a GIN
-- overlap (&&) finds the candidates; the caller confirms the distance (registry.ranking).
CREATE FUNCTION capreg_one_deletions(w text) RETURNS text[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN pg_catalog.array_append(
        ARRAY(SELECT pg_catalog.substr(w, 1, i - 1) || pg_catalog.substr(w, i + 1)
                FROM pg_catalog.generate_series(1, pg_catalog.length(w)) AS i),
        w);

-- The lexicon's words of a text: lower-cased alphanumeric runs of 4 to 32 characters (a query word
-- of 5 or more letters is corrected; one error away it may have 4).
CREATE FUNCTION capreg_lexicon_words(t text) RETURNS SETOF text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT m[1] FROM pg_catalog.regexp_matches(pg_catalog.lower(t), '[[:alnum:]]+', 'g') AS m
     WHERE pg_catalog.length(m[1]) BETWEEN 4 AND 32;
END;

-- Every word ever published (words of retired versions stay: a correction to a word that matches
-- nothing then matches nothing). Grown by publishing (db.capabilities.insert_versions).
CREATE TABLE search_words (
    word     text   PRIMARY KEY,
    variants text[] NOT NULL
);
CREATE INDEX search_words_variants ON search_words USING gin (variants) WITH (fastupdate = off);

INSERT INTO search_words (word, variants)
SELECT w, capreg_one_deletions(w)
  FROM (SELECT DISTINCT capreg_lexicon_words(search_text) AS w FROM capability_versions) AS words
 ORDER BY w;
