-- pgbus_stream 0.2.0 -> 0.3.0 (ALTER EXTENSION pgbus_stream UPDATE).
-- Every change made to pgbus_stream--0.3.0.sql is repeated here, so that a
-- database created with 0.2.0 ends with the same objects as a fresh 0.3.0.
\echo Use "ALTER EXTENSION pgbus_stream UPDATE" to load this file. \quit

-- access: disconnect() (issue 26, credentials that end)

-- ---- Ending connections: disconnect() ------------------------------------

-- disconnect ends live SSE connections on every worker: those whose
-- credential's sub is `sub` (a user who signed out or lost access), or the
-- one connection whose connectionId is `connection` (as connections() and
-- pgbus:connected show it). Each gets a pgbus:shutdown event with reason
-- "disconnected" before its stream ends. Returns how many ended. A client
-- that still holds a valid credential may connect again: revoke that too.
-- Not executable by PUBLIC.
CREATE FUNCTION @extschema@.disconnect(sub text DEFAULT NULL, connection text DEFAULT NULL) RETURNS bigint
  AS 'MODULE_PATHNAME', 'pgbus_stream_disconnect' LANGUAGE C;
REVOKE ALL ON FUNCTION @extschema@.disconnect(text, text) FROM PUBLIC;
