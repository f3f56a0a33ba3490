-- pgbus_stream 0.2.0 -> 0.3.0 (ALTER EXTENSION pgbus_stream UPDATE).
-- Every change made to pgbus_stream--0.3.0.sql is repeated here, so that a
-- database created with 0.2.0 ends with the same objects as a fresh 0.3.0.
\echo Use "ALTER EXTENSION pgbus_stream UPDATE" to load this file. \quit
