-- pgbus_stream 0.1.0 -> 0.2.0 (ALTER EXTENSION pgbus_stream UPDATE).
-- Every change made to pgbus_stream--0.2.0.sql is repeated here, so that a
-- database created with 0.1.0 ends with the same objects as a fresh 0.2.0.
\echo Use "ALTER EXTENSION pgbus_stream UPDATE" to load this file. \quit

-- stream_stats and its id sequence are kept by pg_dump.
SELECT pg_catalog.pg_extension_config_dump('@extschema@.stream_stats', '');
SELECT pg_catalog.pg_extension_config_dump(pg_get_serial_sequence('@extschema@.stream_stats', 'id')::regclass, '');
-- Stream ids (cursor epochs) count microseconds since 2026-01-01, not
-- seconds, so that a quick DROP and CREATE EXTENSION cannot repeat one.
SELECT setval(pg_get_serial_sequence('@extschema@.streams', 'id'),
              greatest((SELECT last_value FROM @extschema@.streams_id_seq),
                       ((extract(epoch FROM clock_timestamp()) - 1767225600) * 1000000)::bigint));
