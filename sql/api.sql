-- SQL surface of pgbus_stream: streams, broadcast, capture, and their errors.
\set VERBOSITY terse
CREATE EXTENSION pgbus_stream;
SELECT extversion FROM pg_extension WHERE extname = 'pgbus_stream';

-- create_stream makes a built-in queue with PGMQ's layout (no PGMQ here)
SELECT name, queue_name, queue_schema, queue_table, archive_table, kind, public
  FROM pgbus_stream.create_stream('chat');
SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute
 WHERE attrelid = 'pgbus_stream.q_pgbus_chat'::regclass AND attnum > 0 ORDER BY attnum;
SELECT tgname, tgenabled FROM pg_trigger WHERE tgrelid = 'pgbus_stream.q_pgbus_chat'::regclass ORDER BY tgname;

-- broadcast writes the pgbus envelope and returns the msg_id
SELECT pgbus_stream.broadcast('chat', '<p>hi</p>') AS first_id;
SELECT pgbus_stream.broadcast('chat', 'x', 'custom:event', 'admins') AS second_id;
SELECT msg_id, message FROM pgbus_stream.q_pgbus_chat ORDER BY msg_id;

-- a rolled-back broadcast leaves no row; a rolled-back savepoint neither
BEGIN;
SELECT pgbus_stream.broadcast('chat', 'rolled back') > 0 AS wrote;
ROLLBACK;
BEGIN;
SAVEPOINT s1;
SELECT pgbus_stream.broadcast('chat', 'in savepoint') > 0 AS wrote;
ROLLBACK TO SAVEPOINT s1;
SELECT pgbus_stream.broadcast('chat', 'kept') > 0 AS wrote;
COMMIT;
SELECT message->>'html' AS html FROM pgbus_stream.q_pgbus_chat ORDER BY msg_id;

-- errors: each leaves everything else untouched
SELECT pgbus_stream.create_stream('chat');
SELECT pgbus_stream.create_stream('');
SELECT pgbus_stream.create_stream('bad name');
SELECT pgbus_stream.create_stream('semi;colon');
SELECT pgbus_stream.broadcast('nope', 'x');
SELECT pgbus_stream.broadcast('chat', NULL);
SELECT pgbus_stream.broadcast('chat', 'x', E'bad\nevent');
SELECT pgbus_stream.broadcast('chat', 'x', 'has space');
SELECT pgbus_stream.broadcast('chat', 'x', '');
SELECT pgbus_stream.attach('no_such_queue');
SELECT pgbus_stream.detach('nope');
SELECT count(*) AS streams FROM pgbus_stream.streams;

-- name limits: 41 characters (47 for PGMQ minus the "pgbus_" prefix) work, 42 do not
SELECT name FROM pgbus_stream.create_stream(repeat('a', 41));
SELECT pgbus_stream.create_stream(repeat('b', 42));
SELECT count(*) FROM pg_tables WHERE tablename LIKE 'q_pgbus_bbb%';

-- attach: an existing PGMQ-layout table, mixed-case queue name
CREATE TABLE pgbus_stream."q_pgbus_MixedCase" (
  msg_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  read_ct int NOT NULL DEFAULT 0,
  enqueued_at timestamptz NOT NULL DEFAULT now(),
  vt timestamptz NOT NULL DEFAULT now(),
  message jsonb);
SELECT name, queue_name, kind, archive_table FROM pgbus_stream.attach('pgbus_MixedCase');
SELECT pgbus_stream.attach('pgbus_MixedCase');
INSERT INTO pgbus_stream."q_pgbus_MixedCase"(message) VALUES ('{"html":"plain insert"}');
COPY pgbus_stream."q_pgbus_MixedCase"(message) FROM stdin;
{"html":"copied"}
\.
SELECT pgbus_stream.broadcast('MixedCase', 'via broadcast') > 0 AS ok;
SELECT message->>'html' FROM pgbus_stream."q_pgbus_MixedCase" ORDER BY msg_id;

-- a table that is not a queue is refused
CREATE TABLE not_a_queue(id int);
SELECT pgbus_stream._hook('x', 'x', 'public', 'not_a_queue', NULL, 'builtin', true, NULL);

-- PREPARE TRANSACTION with stream writes is refused (prepared commits happen elsewhere)
BEGIN;
SELECT pgbus_stream.broadcast('chat', 'prepared') > 0 AS wrote;
PREPARE TRANSACTION 'p1';

-- the capture trigger refuses to be misused
SELECT pgbus_stream._capture();

-- detach keeps the queue, drop_stream removes it
SELECT pgbus_stream.detach('MixedCase');
SELECT tgname FROM pg_trigger WHERE tgrelid = 'pgbus_stream."q_pgbus_MixedCase"'::regclass;
SELECT pgbus_stream.drop_stream('chat');
SELECT to_regclass('pgbus_stream.q_pgbus_chat') IS NULL AS queue_gone,
       to_regclass('pgbus_stream.a_pgbus_chat') IS NULL AS archive_gone;
SELECT name FROM pgbus_stream.streams ORDER BY id;

-- ephemeral broadcasts take ids from the queue's sequence but write no row
SELECT (pgbus_stream.create_stream('eph')).name AS created;
SELECT pgbus_stream.broadcast('eph', 'durable one') AS durable_id;
SELECT pgbus_stream.broadcast('eph', 'gone after delivery', durable => false) AS ephemeral_id;
SELECT pgbus_stream.broadcast('eph', 'durable two') AS durable_id;
SELECT msg_id, message->>'html' AS html FROM pgbus_stream.q_pgbus_eph ORDER BY msg_id;
SELECT pgbus_stream.broadcast('eph', repeat('x', 3000000), durable => false);

-- live figures: committed events are counted at commit, rolled-back ones never
SELECT stream, emitted, newest_id > 0 AS has_newest, subscribers FROM pgbus_stream.stats() ORDER BY stream;
-- a primary has no replay lag
SELECT stream, replay_lag_bytes, replay_lag_ms FROM pgbus_stream.stats() ORDER BY stream;
SELECT count(*) AS workers FROM pgbus_stream.workers();
SELECT count(*) AS connections FROM pgbus_stream.connections();
SELECT count(*) AS alerts FROM pgbus_stream.alerts();
SELECT * FROM pgbus_stream.diagnostics();

-- retention settings and their errors
SELECT pgbus_stream.set_retention('eph', '7 days', 1000);
SELECT retention, retention_max FROM pgbus_stream.streams WHERE name = 'eph';
SELECT pgbus_stream.set_retention('eph', '-1 day');
SELECT pgbus_stream.set_retention('eph', NULL, 0);
SELECT pgbus_stream.set_retention('nope', '1 day');

-- access control: private by default, set_public, audiences, exclude, tokens
SELECT public FROM pgbus_stream.streams WHERE name = 'eph';
SELECT pgbus_stream.set_public('eph', true);
SELECT public FROM pgbus_stream.streams WHERE name = 'eph';
SELECT pgbus_stream.set_public('eph', NULL);
SELECT pgbus_stream.define_audience('admins', '$.role ? (@ == "admin")');
SELECT pgbus_stream.define_audience('admins', '$.admin');
SELECT label, rule FROM pgbus_stream.audiences;
SELECT pgbus_stream.define_audience('bad label', '$.x');
SELECT pgbus_stream.define_audience('x', NULL);
SELECT pgbus_stream.drop_audience('admins');
SELECT count(*) AS audiences FROM pgbus_stream.audiences;
SELECT pgbus_stream.broadcast('eph', 'x', exclude => 'not-an-id');
-- the wire format's rules as SQL checks them (_wire_valid, src/core/wire.hpp)
SELECT pgbus_stream._wire_valid('event_name', 'turbo-stream') AS event_ok,
       pgbus_stream._wire_valid('event_name', repeat('x', 65)) AS event_long,
       pgbus_stream._wire_valid('connection_id', '00000000000000ff') AS id_ok,
       pgbus_stream._wire_valid('connection_id', '0000000000000000') AS id_zero,
       pgbus_stream._wire_valid('connection_id', '00000000000000FF') AS id_upper,
       pgbus_stream._wire_valid('connection_id', NULL) AS id_null;
SELECT pgbus_stream._wire_valid('stream_name', 'x');
SELECT pgbus_stream._wire_valid(NULL, 'x');
INSERT INTO pgbus_stream.audiences (label, rule) VALUES ('has space', '$.x');
SELECT pgbus_stream.broadcast('eph', 'not to 1', exclude => '0000000000000001') > 0 AS ok;
SELECT message->'exclude' AS exclude FROM pgbus_stream.q_pgbus_eph ORDER BY msg_id DESC LIMIT 1;
SELECT pgbus_stream.sign_token(ARRAY['chat'], '1 hour');
SELECT pgbus_stream._publish(1, 'not_a_queue'::regclass, 'x', NULL, NULL, NULL);
SELECT has_function_privilege('public', 'pgbus_stream._capture()', 'EXECUTE') AS public_capture,
       has_function_privilege('public', 'pgbus_stream.connections()', 'EXECUTE') AS public_connections,
       has_function_privilege('pgbus_stream_monitor', 'pgbus_stream.connections()', 'EXECUTE') AS monitor_connections,
       pg_has_role('pg_monitor', 'pgbus_stream_monitor', 'MEMBER') AS pg_monitor_member;

-- a re-created stream gets a new id (its epoch), above every id given so far
SELECT max(id) AS max_id FROM pgbus_stream.streams \gset
SELECT (pgbus_stream.create_stream('chat')).id > :max_id AS new_epoch;
-- also when the extension is dropped and created again
SELECT max(id) AS max_id FROM pgbus_stream.streams \gset
DROP EXTENSION pgbus_stream CASCADE;
CREATE EXTENSION pgbus_stream;
SELECT (pgbus_stream.create_stream('anew')).id > :max_id AS new_epoch_after_recreate;
DROP EXTENSION pgbus_stream CASCADE;
