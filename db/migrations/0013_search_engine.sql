-- Ranked search moved to the search engine (registry.search, docs/performance.md#ranked-search):
-- the full-text vectors and the typo lexicon of 0008 are no longer read. Dropping them takes their
-- upkeep off every publish (a tsvector per version, GIN entries, lexicon rows that any registrant
-- could grow without bound).
DROP INDEX IF EXISTS capability_versions_latest_search;
DROP INDEX IF EXISTS capability_versions_search;
ALTER TABLE capability_versions DROP COLUMN IF EXISTS search_vector;
DROP TABLE IF EXISTS search_words;
DROP FUNCTION IF EXISTS capreg_one_deletions(text);
DROP FUNCTION IF EXISTS capreg_lexicon_words(text);
DROP FUNCTION IF EXISTS capreg_join_words(text[]);
DROP FUNCTION IF EXISTS capreg_search_words(text);
