-- pgbus_stream: committed PGMQ inserts served as Server-Sent Events.
\echo Use "CREATE EXTENSION pgbus_stream" to load this file. \quit

-- Catalog of streams. A stream's id is also its epoch: a dropped and
-- re-created stream gets a new id, which cursor tokens carry.
CREATE TABLE @extschema@.streams (
  id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  name          text NOT NULL UNIQUE,
  queue_name    text NOT NULL,
  queue_schema  text NOT NULL,
  queue_table   text NOT NULL,
  archive_table text,
  kind          text NOT NULL CHECK (kind IN ('pgmq', 'builtin')),
  public        boolean NOT NULL DEFAULT false,  -- private streams need a credential
  retention     interval,
  retention_max bigint CHECK (retention_max > 0),
  retention_floor bigint NOT NULL DEFAULT 0,  -- highest msg_id retention removed
  created_at    timestamptz NOT NULL DEFAULT now(),
  auto_attached boolean NOT NULL DEFAULT false,  -- captured by pgbus_stream.auto_attach
  retention_set boolean NOT NULL DEFAULT false,  -- retention configured: default_retention does not apply
  hooked        boolean NOT NULL DEFAULT true,   -- capture triggers on the queue (auto-attached: at first subscription)
  UNIQUE (queue_schema, queue_table)
);
SELECT pg_catalog.pg_extension_config_dump('@extschema@.streams', '');
-- Stream ids are cursor epochs, so they must never repeat in this cluster,
-- even when the extension is dropped and created again: start them at the
-- number of microseconds since 2026-01-01. Creating a stream takes far longer
-- than a microsecond, so no earlier installation can have got this far.
SELECT setval(pg_get_serial_sequence('@extschema@.streams', 'id'),
              greatest(1, ((extract(epoch FROM clock_timestamp()) - 1767225600) * 1000000)::bigint));

-- Durable subscriber cursors, flushed by the workers in batches.
CREATE TABLE @extschema@.subscribers (
  id          text NOT NULL,
  stream      text NOT NULL,
  cursor      text NOT NULL,
  updated_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (id, stream)
);
SELECT pg_catalog.pg_extension_config_dump('@extschema@.subscribers', '');

-- Optional per-event history (pgbus_stream.stats_enabled), the pgbus gem's
-- pgbus_stream_stats shape; written by the workers in batches, pruned by age
-- (pgbus_stream.stats_max_age).
CREATE TABLE @extschema@.stream_stats (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  stream_name text NOT NULL,
  event_type  text NOT NULL CHECK (event_type IN ('broadcast', 'connect', 'disconnect')),
  duration_ms float8,
  fanout      integer,
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ON @extschema@.stream_stats (created_at);
-- The history is kept by pg_dump too, with its id sequence (else rows written
-- after a restore would take the restored rows' ids).
SELECT pg_catalog.pg_extension_config_dump('@extschema@.stream_stats', '');
SELECT pg_catalog.pg_extension_config_dump(pg_get_serial_sequence('@extschema@.stream_stats', 'id')::regclass, '');

REVOKE ALL ON @extschema@.streams, @extschema@.subscribers, @extschema@.stream_stats FROM PUBLIC;

-- The capture trigger function. Not executable by PUBLIC: only who may
-- hook a queue (create_stream/attach) puts it on a table. It checks that the
-- stream id it is given is the one the catalog records for its table.
CREATE FUNCTION @extschema@._capture() RETURNS trigger
  AS 'MODULE_PATHNAME', 'pgbus_stream_capture' LANGUAGE C;
REVOKE ALL ON FUNCTION @extschema@._capture() FROM PUBLIC;

-- _capture_applied is _capture under the name of pgbus_stream_applied, the
-- REPLICA trigger that queues hooked by earlier 0.2.0 builds (and dumps of
-- them) carry; queues hooked now have the one capture trigger, enabled
-- ALWAYS, that also captures the rows logical replication applies.
CREATE FUNCTION @extschema@._capture_applied() RETURNS trigger
  AS 'MODULE_PATHNAME', 'pgbus_stream_capture_applied' LANGUAGE C;
REVOKE ALL ON FUNCTION @extschema@._capture_applied() FROM PUBLIC;

CREATE FUNCTION @extschema@._catalog_changed(stream_id bigint, fresh boolean DEFAULT false) RETURNS void
  AS 'MODULE_PATHNAME', 'pgbus_stream_catalog_changed' LANGUAGE C;
REVOKE ALL ON FUNCTION @extschema@._catalog_changed(bigint, boolean) FROM PUBLIC;

-- _echo is what an error message shows of a caller's text: at most 64
-- bytes, then "..." and its size (every error quoting an argument uses it).
CREATE FUNCTION @extschema@._echo(t text) RETURNS text
  AS 'MODULE_PATHNAME', 'pgbus_stream_echo' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- _wire_valid says whether a text is a valid event name ('event_name', also
-- audience labels) or connection id ('connection_id'): the rules of the wire
-- format (src/core/wire.hpp), the same code the workers run.
CREATE FUNCTION @extschema@._wire_valid(kind text, value text) RETURNS boolean
  AS 'MODULE_PATHNAME', 'pgbus_stream_wire_valid' LANGUAGE C IMMUTABLE PARALLEL SAFE;

-- _check_stream_name raises a clear error unless name can name a stream
-- (it ends up in URLs and cursor tokens).
CREATE FUNCTION @extschema@._check_stream_name(name text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF name IS NULL OR name = '' THEN
    RAISE EXCEPTION 'pgbus_stream: stream name must not be empty' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF name !~ '^[A-Za-z0-9_][A-Za-z0-9_.-]*$' THEN
    RAISE EXCEPTION 'pgbus_stream: invalid stream name "%"', @extschema@._echo(name)
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Use letters, digits, "_", "-" and "." (not first).';
  END IF;
  IF length(name) > 128 THEN
    RAISE EXCEPTION 'pgbus_stream: stream name "%" is longer than 128 characters', @extschema@._echo(name)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
END $$;

-- _queue_problem says why a table cannot be taken as a queue (or archive)
-- table, or NULL when it can: a plain or partitioned table without rules,
-- with PGMQ's columns (msg_id bigint, read_ct integer, enqueued_at and vt
-- timestamptz, message jsonb; headers, if present, jsonb), whose partitions
-- are plain tables of the same owner without rules. The workers check the
-- same before each statement on a queue: its owner may change it any time.
CREATE FUNCTION @extschema@._queue_problem(rel regclass) RETURNS text
  AS 'MODULE_PATHNAME', 'pgbus_stream_queue_problem' LANGUAGE C STABLE STRICT;

-- _hook installs the capture trigger on a queue table and records the stream.
CREATE FUNCTION @extschema@._hook(p_name text, p_queue text, p_schema text, p_table text,
                                  p_archive text, p_kind text, p_public boolean,
                                  p_retention interval, p_auto boolean DEFAULT false)
RETURNS @extschema@.streams LANGUAGE plpgsql AS $$
DECLARE
  s @extschema@.streams;
  rel regclass := to_regclass(format('%I.%I', p_schema, p_table));
  archive regclass;
  problem text;
BEGIN
  IF rel IS NULL THEN
    RAISE EXCEPTION 'pgbus_stream: queue table %.% does not exist', p_schema, p_table
      USING ERRCODE = 'undefined_table';
  END IF;
  problem := @extschema@._queue_problem(rel);
  IF problem IS NOT NULL THEN
    RAISE EXCEPTION 'pgbus_stream: % is not a PGMQ queue table: %', rel, problem
      USING ERRCODE = 'wrong_object_type';
  END IF;
  IF EXISTS (SELECT 1 FROM @extschema@.streams WHERE name = p_name) THEN
    RAISE EXCEPTION 'pgbus_stream: stream "%" already exists', p_name USING ERRCODE = 'duplicate_object';
  END IF;
  IF EXISTS (SELECT 1 FROM @extschema@.streams WHERE queue_schema = p_schema AND queue_table = p_table) THEN
    RAISE EXCEPTION 'pgbus_stream: queue % is already attached', rel USING ERRCODE = 'duplicate_object';
  END IF;
  IF p_archive IS NOT NULL THEN
    archive := to_regclass(format('%I.%I', p_schema, p_archive));
  END IF;
  IF archive IS NULL THEN
    p_archive := NULL;
  ELSE
    problem := coalesce(@extschema@._queue_problem(archive),
                        CASE WHEN (SELECT relowner FROM pg_class WHERE oid = archive)
                                  <> (SELECT relowner FROM pg_class WHERE oid = rel)
                             THEN 'it belongs to another role than the queue' END);
    IF problem IS NOT NULL THEN
      RAISE EXCEPTION 'pgbus_stream: % is not a PGMQ archive table: %', archive, problem
        USING ERRCODE = 'wrong_object_type';
    END IF;
  END IF;
  INSERT INTO @extschema@.streams (name, queue_name, queue_schema, queue_table, archive_table, kind, public,
                                   retention, retention_set, auto_attached, hooked)
  VALUES (p_name, p_queue, p_schema, p_table, p_archive, p_kind, p_public, p_retention, p_retention IS NOT NULL,
          p_auto, false)
  RETURNING * INTO s;
  IF p_auto THEN
    -- No triggers until someone subscribes (_hook_triggers): a queue nobody
    -- watches, like the gem's job queues, costs its producers nothing.
    -- Workers learn of the stream from its first subscription, or at commit
    -- when a subscription waits for it (_stream_born); such a queue is hooked
    -- now, so that the sends of this very transaction are captured.
    PERFORM @extschema@._stream_born(s.id);
    IF @extschema@._stream_awaited(p_name) THEN
      PERFORM @extschema@._hook_triggers(s.id);
      SELECT * INTO s FROM @extschema@.streams WHERE id = s.id;
    END IF;
    RETURN s;
  END IF;
  PERFORM @extschema@._hook_triggers(s.id);
  PERFORM @extschema@._catalog_changed(s.id, true);
  SELECT * INTO s FROM @extschema@.streams WHERE id = s.id;
  RETURN s;
END $$;

-- _hook_triggers puts the capture trigger on a stream's queue table (the
-- library publishes the floor before a statement that fires pgbus_stream_capture
-- draws any id, so no statement trigger is needed). It is enabled ALWAYS:
-- a subscription's apply worker (session_replication_role = replica) fires
-- it too, and _capture() then keeps the publisher's ids. For an
-- auto-attached stream the worker calls it at the first subscription: CREATE
-- TRIGGER waits for the inserts in flight, so every row committed before it
-- is in the table (replayed from there) and every later one is captured.
CREATE FUNCTION @extschema@._hook_triggers(stream_id bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  s @extschema@.streams;
  problem text;
BEGIN
  SELECT * INTO s FROM @extschema@.streams WHERE id = stream_id FOR UPDATE;
  IF NOT FOUND OR s.hooked THEN
    RETURN;
  END IF;
  -- its owner may have changed it since it was attached
  problem := @extschema@._queue_problem(format('%I.%I', s.queue_schema, s.queue_table)::regclass);
  IF problem IS NOT NULL THEN
    RAISE EXCEPTION 'pgbus_stream: %.% is not a PGMQ queue table: %', s.queue_schema, s.queue_table, problem
      USING ERRCODE = 'wrong_object_type';
  END IF;
  EXECUTE format('CREATE TRIGGER pgbus_stream_capture AFTER INSERT ON %I.%I FOR EACH ROW '
                 'EXECUTE FUNCTION @extschema@._capture(%L)', s.queue_schema, s.queue_table, s.id);
  EXECUTE format('ALTER TABLE %I.%I ENABLE ALWAYS TRIGGER pgbus_stream_capture', s.queue_schema, s.queue_table);
  UPDATE @extschema@.streams SET hooked = true WHERE id = s.id;
END $$;
REVOKE ALL ON FUNCTION @extschema@._hook_triggers(bigint) FROM PUBLIC;

-- create_stream makes a queue for a stream (a PGMQ queue when PGMQ is
-- installed, else a built-in table with PGMQ's layout) and hooks it.
CREATE FUNCTION @extschema@.create_stream(name text, public boolean DEFAULT false,
                                          retention interval DEFAULT NULL)
RETURNS @extschema@.streams LANGUAGE plpgsql AS $$
DECLARE
  prefix text := coalesce(current_setting('pgbus_stream.queue_prefix', true), 'pgbus_');
  queue text;
  maxlen int;
  adopted @extschema@.streams;
BEGIN
  PERFORM @extschema@._check_stream_name(name);
  maxlen := 47 - length(prefix);  -- PGMQ's limit on queue names
  IF length(name) > maxlen THEN
    RAISE EXCEPTION 'pgbus_stream: stream name "%" is too long (% characters, at most % with queue prefix "%")',
      @extschema@._echo(name), length(name), maxlen, prefix USING ERRCODE = 'name_too_long';
  END IF;
  IF name !~ '^[A-Za-z0-9_]+$' THEN
    RAISE EXCEPTION 'pgbus_stream: invalid stream name "%" for a new queue', name
      USING ERRCODE = 'invalid_parameter_value', HINT = 'Use letters, digits and "_"; attach() takes any queue.';
  END IF;
  IF EXISTS (SELECT 1 FROM @extschema@.streams s WHERE s.name = create_stream.name) THEN
    RAISE EXCEPTION 'pgbus_stream: stream "%" already exists', name USING ERRCODE = 'duplicate_object';
  END IF;
  queue := prefix || name;
  IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pgmq') THEN
    EXECUTE 'SELECT pgmq.create($1)' USING queue;
    adopted := @extschema@._adopt('pgmq', 'q_' || queue, name, public, retention);
    IF adopted.id IS NOT NULL THEN
      RETURN adopted;  -- pgbus_stream.auto_attach captured it already
    END IF;
    RETURN @extschema@._hook(name, queue, 'pgmq', 'q_' || queue, 'a_' || queue, 'pgmq', public, retention);
  END IF;
  IF to_regclass(format('@extschema@.%I', 'q_' || queue)) IS NOT NULL THEN
    RAISE EXCEPTION 'pgbus_stream: queue table @extschema@.% already exists', 'q_' || queue
      USING ERRCODE = 'duplicate_table', HINT = 'Use attach() to hook an existing queue.';
  END IF;
  EXECUTE format('CREATE TABLE @extschema@.%I (
      msg_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      read_ct integer NOT NULL DEFAULT 0,
      enqueued_at timestamptz NOT NULL DEFAULT now(),
      last_read_at timestamptz,
      vt timestamptz NOT NULL DEFAULT clock_timestamp(),
      message jsonb,
      headers jsonb)', 'q_' || queue);
  EXECUTE format('CREATE TABLE @extschema@.%I (
      msg_id bigint PRIMARY KEY,
      read_ct integer NOT NULL DEFAULT 0,
      enqueued_at timestamptz NOT NULL DEFAULT now(),
      last_read_at timestamptz,
      archived_at timestamptz NOT NULL DEFAULT now(),
      vt timestamptz NOT NULL,
      message jsonb,
      headers jsonb)', 'a_' || queue);
  RETURN @extschema@._hook(name, queue, '@extschema@', 'q_' || queue, 'a_' || queue, 'builtin', public, retention);
END $$;

-- attach hooks an existing PGMQ queue (e.g. pgbus_chat made by the pgbus gem);
-- the stream is named after the queue without pgbus_stream.queue_prefix.
CREATE FUNCTION @extschema@.attach(queue_name text, stream_name text DEFAULT NULL,
                                   public boolean DEFAULT false)
RETURNS @extschema@.streams LANGUAGE plpgsql AS $$
DECLARE
  sname text := coalesce(stream_name, @extschema@._stream_name_of(queue_name));
  qschema text;
  s @extschema@.streams;
BEGIN
  IF queue_name IS NULL OR queue_name = '' THEN
    RAISE EXCEPTION 'pgbus_stream: queue name must not be empty' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  PERFORM @extschema@._check_stream_name(sname);
  IF to_regclass(format('pgmq.%I', 'q_' || queue_name)) IS NOT NULL THEN
    qschema := 'pgmq';
  ELSIF to_regclass(format('@extschema@.%I', 'q_' || queue_name)) IS NOT NULL THEN
    qschema := '@extschema@';
  ELSE
    RAISE EXCEPTION 'pgbus_stream: queue "%" not found (no table pgmq.q_% or @extschema@.q_%)',
      @extschema@._echo(queue_name), @extschema@._echo(queue_name), @extschema@._echo(queue_name) USING ERRCODE = 'undefined_table';
  END IF;
  s := @extschema@._adopt(qschema, 'q_' || queue_name, sname, public, NULL);
  IF s.id IS NOT NULL THEN
    RETURN s;  -- captured by pgbus_stream.auto_attach: now attached by hand
  END IF;
  RETURN @extschema@._hook(sname, queue_name, qschema, 'q_' || queue_name, 'a_' || queue_name,
                           CASE WHEN qschema = 'pgmq' THEN 'pgmq' ELSE 'builtin' END, public, NULL);
END $$;

-- _stream finds a stream by its name or by the pgbus gem's logical name
-- (whose queue is pgmq.q_<queue_name(logical)>).
CREATE FUNCTION @extschema@._stream(p_name text) RETURNS @extschema@.streams
LANGUAGE plpgsql STABLE AS $$
DECLARE s @extschema@.streams;
BEGIN
  SELECT * INTO s FROM @extschema@.streams WHERE name = p_name;
  IF NOT FOUND THEN
    SELECT * INTO s FROM @extschema@.streams
     WHERE queue_schema = 'pgmq' AND queue_table = 'q_' || @extschema@._queue_name_or_null(p_name);
  END IF;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'pgbus_stream: stream "%" does not exist', @extschema@._echo(p_name) USING ERRCODE = 'undefined_object';
  END IF;
  RETURN s;
END $$;

-- detach removes the capture hook and forgets the stream; the queue stays.
CREATE FUNCTION @extschema@.detach(name text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE s @extschema@.streams := @extschema@._stream(name);
        rel regclass := to_regclass(format('%I.%I', s.queue_schema, s.queue_table));
BEGIN
  IF rel IS NOT NULL THEN
    EXECUTE format('DROP TRIGGER IF EXISTS pgbus_stream_capture ON %s', rel);
    -- of queues hooked by earlier 0.2.0 builds (see _capture_applied)
    IF EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = rel AND tgname = 'pgbus_stream_applied') THEN
      EXECUTE format('DROP TRIGGER pgbus_stream_applied ON %s', rel);
    END IF;
  END IF;
  DELETE FROM @extschema@.streams WHERE id = s.id;
  DELETE FROM @extschema@.subscribers WHERE stream = s.name;
  PERFORM @extschema@._catalog_changed(NULL);
END $$;

-- drop_stream detaches a stream and drops its queue and archive.
CREATE FUNCTION @extschema@.drop_stream(name text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE s @extschema@.streams := @extschema@._stream(name);
BEGIN
  PERFORM @extschema@.detach(name);
  IF s.kind = 'pgmq' AND EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pgmq') THEN
    EXECUTE 'SELECT pgmq.drop_queue($1)' USING s.queue_name;
  ELSE
    EXECUTE format('DROP TABLE IF EXISTS %I.%I', s.queue_schema, s.queue_table);
    IF s.archive_table IS NOT NULL THEN
      EXECUTE format('DROP TABLE IF EXISTS %I.%I', s.queue_schema, s.archive_table);
    END IF;
  END IF;
END $$;

-- _broadcast_target gives broadcast() a stream's id and queue table, for any
-- caller (the catalog itself is not readable by PUBLIC); broadcast() then
-- checks the caller's INSERT privilege on the queue.
CREATE FUNCTION @extschema@._broadcast_target(p_stream text, OUT stream_id bigint, OUT queue regclass)
  AS 'MODULE_PATHNAME', 'pgbus_stream_broadcast_target' LANGUAGE C STABLE;

-- _publish(stream_id, queue, data, event, visible_to, exclude): a broadcast
-- without a table row. It checks that the caller may INSERT into the queue and
-- that the queue is the stream's, takes an id from the queue's msg_id
-- sequence, and sends the payload through the ring at commit.
CREATE FUNCTION @extschema@._publish(stream_id bigint, queue regclass, data text, event text,
                                     visible_to text, exclude text) RETURNS bigint
  AS 'MODULE_PATHNAME', 'pgbus_stream_publish' LANGUAGE C;

-- _draw_id(stream_id, queue) is the msg_id of the row broadcast() inserts:
-- drawn from the queue's sequence after the transaction's floor, for a
-- caller allowed to INSERT into the stream's queue, hooked or not yet.
CREATE FUNCTION @extschema@._draw_id(stream_id bigint, queue regclass) RETURNS bigint
  AS 'MODULE_PATHNAME', 'pgbus_stream_draw_id' LANGUAGE C STRICT;

-- _captured_id is the msg_id of the row this backend's last captured INSERT wrote.
CREATE FUNCTION @extschema@._captured_id() RETURNS bigint
  AS 'MODULE_PATHNAME', 'pgbus_stream_captured_id' LANGUAGE C;

-- broadcast writes the pgbus envelope into the stream's queue inside the
-- caller's transaction and returns its msg_id; subscribers get it at commit.
-- It runs with the caller's rights: publishing needs INSERT on the stream's
-- queue table (and USAGE on its schema). durable => false writes no row: the
-- event takes an id from the queue's sequence, travels through shared memory
-- at commit, and stays replayable only from the workers' memory
-- (pgbus_stream.memory_retention). exclude names one connection (the
-- connectionId of its pgbus:connected event) that does not get this message.
CREATE FUNCTION @extschema@.broadcast(stream text, data text, event text DEFAULT NULL,
                                      visible_to text DEFAULT NULL, durable boolean DEFAULT true,
                                      exclude text DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  t record := @extschema@._broadcast_target(stream);
  id bigint;
BEGIN
  IF data IS NULL THEN
    RAISE EXCEPTION 'pgbus_stream: broadcast data must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  IF event IS NOT NULL AND NOT @extschema@._wire_valid('event_name', event) THEN
    RAISE EXCEPTION 'pgbus_stream: invalid event name %', quote_literal(event)
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Event names are 1 to 64 printable ASCII characters without spaces or line breaks.';
  END IF;
  IF exclude IS NOT NULL AND NOT @extschema@._wire_valid('connection_id', exclude) THEN
    RAISE EXCEPTION 'pgbus_stream: invalid connection id %', quote_literal(exclude)
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Use the connectionId of a pgbus:connected event (16 hex digits).';
  END IF;
  IF NOT has_table_privilege(t.queue, 'INSERT') THEN
    RAISE EXCEPTION 'pgbus_stream: permission denied to broadcast to stream "%"', @extschema@._echo(stream)
      USING ERRCODE = 'insufficient_privilege',
            HINT = format('GRANT INSERT ON %s TO the publishing role.', t.queue);
  END IF;
  IF durable IS NOT TRUE THEN
    RETURN @extschema@._publish(t.stream_id, t.queue, data, event, visible_to, exclude);
  END IF;
  id := @extschema@._draw_id(t.stream_id, t.queue);
  EXECUTE format('INSERT INTO %s (msg_id, vt, message) OVERRIDING SYSTEM VALUE '
                 'VALUES ($1, clock_timestamp(), $2)', t.queue)
    USING id, jsonb_strip_nulls(jsonb_build_object('html', data, 'event', event, 'visible_to', visible_to,
                                                   'exclude', exclude));
  RETURN id;
END $$;

-- _rows_sql builds the worker's query for a stream's rows: queue and archive,
-- each message whole (the worker reads the envelope's fields from it,
-- detoasting it once; each operator on it here would detoast it again). No
-- expression in it can fail for one row (enqueued_at = 'infinity' is
-- clamped), so one odd row never fails the reads of its stream.
CREATE FUNCTION @extschema@._rows_sql(s @extschema@.streams) RETURNS text
LANGUAGE sql STABLE AS $$
  SELECT format($q$SELECT msg_id, message,
      least(greatest(extract(epoch FROM enqueued_at) * 1000000, -9223372036854775808),
            9223372036854775807)::bigint
    FROM (SELECT msg_id, message, enqueued_at FROM %I.%I %s) m$q$,
    s.queue_schema, s.queue_table,
    CASE WHEN s.archive_table IS NOT NULL AND to_regclass(format('%I.%I', s.queue_schema, s.archive_table)) IS NOT NULL
         THEN format('UNION ALL SELECT msg_id, message, enqueued_at FROM %I.%I', s.queue_schema, s.archive_table)
         ELSE '' END)
$$;

CREATE FUNCTION @extschema@._stream_stats(
  OUT stream_id bigint, OUT subscribers bigint, OUT emitted bigint, OUT queued bigint,
  OUT overflow_dropped bigint, OUT failed bigint, OUT bytes_queued bigint, OUT newest_id bigint,
  OUT latency_p50_ms float8, OUT latency_p99_ms float8, OUT retention_removed bigint, OUT horizon bigint)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgbus_stream_stream_stats' LANGUAGE C;

-- _oldest_id is the lowest msg_id a stream still holds (queue or archive);
-- NULL when a table is not one a queue can be (a view, rules: reading it
-- would run its owner's code with the caller's rights).
CREATE FUNCTION @extschema@._oldest_id(s @extschema@.streams) RETURNS bigint
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v bigint;
  q regclass := to_regclass(format('%I.%I', s.queue_schema, s.queue_table));
  a regclass := CASE WHEN s.archive_table IS NOT NULL
                     THEN to_regclass(format('%I.%I', s.queue_schema, s.archive_table)) END;
BEGIN
  IF q IS NULL OR @extschema@._queue_problem(q) IS NOT NULL
     OR (a IS NOT NULL AND @extschema@._queue_problem(a) IS NOT NULL) THEN
    RETURN NULL;
  END IF;
  EXECUTE format('SELECT min(msg_id) FROM %I.%I', s.queue_schema, s.queue_table) INTO v;
  IF a IS NOT NULL THEN
    EXECUTE format('SELECT least($1, (SELECT min(msg_id) FROM %I.%I))', s.queue_schema, s.archive_table)
      INTO v USING v;
  END IF;
  RETURN v;
END $$;

-- workers() shows each running worker process and its counters (README,
-- "Glossary of figures"): queued, overflow_dropped, catch_ups;
-- catalog_reads counts the catalog queries it ran (an unknown stream name
-- asked again costs none), pending its subscriptions waiting for a stream
-- that does not exist yet, streams the shared-memory stream entries it holds
-- (streams with connections there, or left within stream_linger).
-- delivered is 0.2.0's name of queued, kept for one version.
CREATE FUNCTION @extschema@.workers(
  OUT worker int, OUT pid int, OUT connections bigint, OUT queued bigint, OUT overflow_dropped bigint,
  OUT catch_ups bigint, OUT events bigint, OUT ring_overflows bigint, OUT held_back bigint,
  OUT catalog_reads bigint, OUT pending bigint, OUT streams bigint, OUT delivered bigint)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgbus_stream_worker_stats' LANGUAGE C;

-- connections() shows each live SSE connection (refreshed by its worker
-- about twice a second): queued_events and queued_bytes wait in its queue
-- now, written frames went to its socket, overflow_dropped frames were
-- dropped by the overflow policy. delivered (= written) and dropped
-- (= overflow_dropped) are 0.2.0's names, kept for one version.
CREATE FUNCTION @extschema@.connections(
  OUT id text, OUT worker int, OUT streams text, OUT remote_addr text, OUT connected_at timestamptz,
  OUT cursor text, OUT queued_events bigint, OUT queued_bytes bigint, OUT written bigint,
  OUT overflow_dropped bigint, OUT state text, OUT subscriber text, OUT delivered bigint,
  OUT dropped bigint)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgbus_stream_connections' LANGUAGE C;

-- presence() lists who is connected to a stream over every worker, from the
-- connection rows the workers publish: one row per identity (the
-- credential's sub; NULL: the anonymous connections together) with its
-- number of connections. A public stream's for any caller; a private one's
-- for superusers, members of pgbus_stream_monitor and the extension's owner
-- (checked inside: the catalog is not readable by PUBLIC).
CREATE FUNCTION @extschema@.presence(stream text, OUT sub text, OUT connections bigint)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgbus_stream_presence' LANGUAGE C;

-- replication() shows where this node stands in WAL replay (NULLs on a
-- primary): the WAL received and replayed, the bytes between them, the
-- commit time of the last transaction replayed; and the floors of the
-- primary's transactions in flight that the standby holds, how many did not
-- fit its table and how many were swept after their transaction aborted.
CREATE FUNCTION @extschema@.replication(
  OUT in_recovery boolean, OUT received_lsn pg_lsn, OUT replayed_lsn pg_lsn,
  OUT replay_lag_bytes bigint, OUT last_replayed_commit timestamptz, OUT standby_floors int,
  OUT floor_overflows bigint, OUT floors_swept bigint)
RETURNS record AS 'MODULE_PATHNAME', 'pgbus_stream_replication' LANGUAGE C STABLE;

-- stats() shows live per-stream figures from shared memory (summed over the
-- workers; README, "Glossary of figures"): queued frames and bytes_queued
-- went into connections' queues, overflow_dropped were dropped from them by
-- the overflow policy, retention_removed messages were removed by retention;
-- total_queued sums what waits in the connections' queues now; latency is
-- commit -> queued on the connection over the last minute. On a hot standby
-- replay_lag_bytes and replay_lag_ms say how far replay trails what the node
-- received (the time since the last replayed commit while WAL waits to be
-- replayed, 0 when none does); NULL on a primary. From replication().
-- delivered (= queued), dropped (= retention_removed) and bytes_sent
-- (= bytes_queued) are 0.2.0's names, kept for one version.
CREATE FUNCTION @extschema@.stats(
  OUT stream text, OUT subscribers bigint, OUT emitted bigint, OUT queued bigint,
  OUT retention_removed bigint, OUT overflow_dropped bigint, OUT failed bigint, OUT total_queued bigint,
  OUT bytes_queued bigint, OUT oldest_id bigint, OUT newest_id bigint, OUT horizon bigint,
  OUT retention_floor bigint, OUT latency_p50_ms float8, OUT latency_p99_ms float8,
  OUT replay_lag_bytes bigint, OUT replay_lag_ms float8,
  OUT delivered bigint, OUT dropped bigint, OUT bytes_sent bigint)
RETURNS SETOF record LANGUAGE sql STABLE AS $$
  SELECT f.*, f.queued, f.retention_removed, f.bytes_queued FROM (
  SELECT s.name, coalesce(x.subscribers, 0), coalesce(x.emitted, 0), coalesce(x.queued, 0) AS queued,
         coalesce(x.retention_removed, 0) AS retention_removed, coalesce(x.overflow_dropped, 0),
         coalesce(x.failed, 0),
         coalesce((SELECT sum(c.queued_events) FROM @extschema@.connections() c
                    WHERE s.name = ANY(string_to_array(c.streams, ','))), 0)::bigint,
         coalesce(x.bytes_queued, 0) AS bytes_queued, @extschema@._oldest_id(s), coalesce(x.newest_id, 0),
         coalesce(x.horizon, 0), s.retention_floor,
         x.latency_p50_ms, x.latency_p99_ms,
         r.replay_lag_bytes, r.replay_lag_ms
    FROM @extschema@.streams s LEFT JOIN @extschema@._stream_stats() x ON x.stream_id = s.id
         CROSS JOIN (SELECT q.replay_lag_bytes,
                            CASE WHEN q.in_recovery THEN
                              CASE WHEN q.replay_lag_bytes = 0 THEN 0::float8
                                   ELSE greatest(0, extract(epoch FROM clock_timestamp() - q.last_replayed_commit)
                                                    * 1000)::float8 END
                            END AS replay_lag_ms
                       FROM @extschema@.replication() q) r) f
   ORDER BY f.name
$$;

-- set_retention sets how long (max_age) and how many (max_messages) messages
-- a stream keeps; NULL turns a limit off. The workers remove older rows in
-- small batches (built-in queues: deleted; PGMQ queues: moved to the archive
-- table, which PGMQ users manage).
CREATE FUNCTION @extschema@.set_retention(name text, max_age interval, max_messages bigint DEFAULT NULL)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE s @extschema@.streams := @extschema@._stream(name);
BEGIN
  IF max_age IS NOT NULL AND max_age <= interval '0' THEN
    RAISE EXCEPTION 'pgbus_stream: max_age must be positive' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF max_messages IS NOT NULL AND max_messages <= 0 THEN
    RAISE EXCEPTION 'pgbus_stream: max_messages must be positive' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  UPDATE @extschema@.streams SET retention = max_age, retention_max = max_messages, retention_set = true
   WHERE id = s.id;
  PERFORM @extschema@._catalog_changed(s.id);
END $$;

-- diagnostics() lists recent connection lifecycle events (subscribed,
-- rejected, closed with its reason, evicted, overflow, failed), oldest first;
-- evicted_before counts older entries the bounded ring no longer holds
-- (pgbus_stream.diagnostics_size).
CREATE FUNCTION @extschema@.diagnostics(
  OUT at timestamptz, OUT worker int, OUT connection text, OUT event text, OUT stream text,
  OUT detail text, OUT evicted_before bigint)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgbus_stream_diagnostics' LANGUAGE C;

-- alerts() compares live figures with the pgbus_stream.alert_* thresholds:
-- failed_total, overflow_dropped_total and total_queued per stream, and
-- queue_pressure (the fuller of queued events over queue_max_events and
-- queued bytes over queue_max_bytes) per connection.
CREATE FUNCTION @extschema@.alerts(
  OUT code text, OUT severity text, OUT stream text, OUT connection text, OUT subscriber text,
  OUT value float8, OUT threshold float8)
RETURNS SETOF record LANGUAGE sql STABLE AS $$
  WITH t AS (
    SELECT current_setting('pgbus_stream.alert_failed_total')::float8 AS failed,
           current_setting('pgbus_stream.alert_overflow_dropped_total')::float8 AS overflow,
           current_setting('pgbus_stream.alert_total_queued')::float8 AS queued,
           current_setting('pgbus_stream.alert_queue_pressure_ratio')::float8 AS pressure,
           current_setting('pgbus_stream.queue_max_events')::float8 AS max_events,
           pg_size_bytes(current_setting('pgbus_stream.queue_max_bytes'))::float8 AS max_bytes)
  SELECT 'failed_total', 'critical', s.stream, NULL::text, NULL::text, s.failed::float8, t.failed
    FROM @extschema@.stats() s, t WHERE t.failed > 0 AND s.failed >= t.failed
  UNION ALL
  SELECT 'overflow_dropped_total', 'warning', s.stream, NULL, NULL, s.overflow_dropped::float8, t.overflow
    FROM @extschema@.stats() s, t WHERE t.overflow > 0 AND s.overflow_dropped >= t.overflow
  UNION ALL
  SELECT 'total_queued', 'warning', s.stream, NULL, NULL, s.total_queued::float8, t.queued
    FROM @extschema@.stats() s, t WHERE t.queued > 0 AND s.total_queued >= t.queued
  UNION ALL
  SELECT 'queue_pressure_ratio', 'warning', c.streams, c.id, c.subscriber,
         greatest(c.queued_events / t.max_events, c.queued_bytes / t.max_bytes), t.pressure
    FROM @extschema@.connections() c, t
   WHERE t.pressure > 0 AND greatest(c.queued_events / t.max_events, c.queued_bytes / t.max_bytes) >= t.pressure
$$;

-- ---- The pgbus gem's queues: names, auto-attach, forgetting dropped queues ----

-- queue_name returns the PGMQ queue the pgbus gem uses for a logical stream
-- name ('ai_chat_3a4f:messages' -> 'pgbus_ai_chat_3a4f_messages'); an error
-- when the queue name would be longer than PGMQ's 47 characters.
CREATE FUNCTION @extschema@.queue_name(logical text) RETURNS text
  AS 'MODULE_PATHNAME', 'pgbus_stream_queue_name' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- _queue_name_or_null is queue_name, NULL instead of an error.
CREATE FUNCTION @extschema@._queue_name_or_null(logical text) RETURNS text
  AS 'MODULE_PATHNAME', 'pgbus_stream_queue_name_or_null' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- _auto_attach_match tells whether pgbus_stream.auto_attach captures a queue.
CREATE FUNCTION @extschema@._auto_attach_match(queue text) RETURNS boolean
  AS 'MODULE_PATHNAME', 'pgbus_stream_auto_attach_match' LANGUAGE C STABLE STRICT;

-- _stream_born clears what an older stream with the same id left in shared
-- memory, without taking an entry for the new one, and at commit tells the
-- workers that a stream was born (without a full catalog reload).
CREATE FUNCTION @extschema@._stream_born(stream_id bigint) RETURNS void
  AS 'MODULE_PATHNAME', 'pgbus_stream_stream_born' LANGUAGE C STRICT;
REVOKE ALL ON FUNCTION @extschema@._stream_born(bigint) FROM PUBLIC;

-- _stream_awaited tells whether a subscription waits for the stream of this
-- name (pgbus_stream.max_pending_streams bounds how many are awaited).
CREATE FUNCTION @extschema@._stream_awaited(name text) RETURNS boolean
  AS 'MODULE_PATHNAME', 'pgbus_stream_stream_awaited' LANGUAGE C STABLE STRICT;
REVOKE ALL ON FUNCTION @extschema@._stream_awaited(text) FROM PUBLIC;

-- _stream_name_of names the stream of a queue: the queue without
-- pgbus_stream.queue_prefix.
CREATE FUNCTION @extschema@._stream_name_of(queue text) RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE prefix text := coalesce(current_setting('pgbus_stream.queue_prefix', true), 'pgbus_');
BEGIN
  RETURN CASE WHEN prefix <> '' AND starts_with(queue, prefix) AND length(queue) > length(prefix)
              THEN substr(queue, length(prefix) + 1) ELSE queue END;
END $$;

-- _adopt turns an auto-attached stream into one configured by hand
-- (create_stream or attach on a queue auto_attach captured first); returns
-- an empty row when the queue was not auto-attached.
CREATE FUNCTION @extschema@._adopt(p_schema text, p_table text, p_name text, p_public boolean,
                                   p_retention interval)
RETURNS @extschema@.streams LANGUAGE plpgsql AS $$
DECLARE s @extschema@.streams;
BEGIN
  UPDATE @extschema@.streams
     SET name = p_name, public = p_public, auto_attached = false,
         retention = coalesce(p_retention, retention), retention_set = retention_set OR p_retention IS NOT NULL
   WHERE queue_schema = p_schema AND queue_table = p_table AND auto_attached
  RETURNING * INTO s;
  IF FOUND THEN
    PERFORM @extschema@._hook_triggers(s.id);
    PERFORM @extschema@._catalog_changed(s.id);
    SELECT * INTO s FROM @extschema@.streams WHERE id = s.id;
  END IF;
  RETURN s;
END $$;

-- _auto_attach hooks pgmq.q_<queue> for auto_attach. It never fails: a queue
-- it cannot hook (name taken, not PGMQ-shaped) gets a WARNING, so that
-- pgmq.create() keeps working for the application. Returns whether it hooked.
CREATE FUNCTION @extschema@._auto_attach(p_queue text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE sname text := @extschema@._stream_name_of(p_queue);
BEGIN
  IF EXISTS (SELECT 1 FROM @extschema@.streams WHERE queue_schema = 'pgmq' AND queue_table = 'q_' || p_queue) THEN
    RETURN false;
  END IF;
  IF EXISTS (SELECT 1 FROM @extschema@.streams WHERE name = sname) THEN
    sname := p_queue;  -- a stream of another queue has the short name
  END IF;
  BEGIN
    PERFORM @extschema@._check_stream_name(sname);
    -- private: the gem reads its streams with signed names, and job queues
    -- share the prefix (their payloads are nobody's to read)
    PERFORM @extschema@._hook(sname, p_queue, 'pgmq', 'q_' || p_queue, 'a_' || p_queue, 'pgmq', false, NULL, true);
  EXCEPTION WHEN OTHERS THEN
    RAISE WARNING 'pgbus_stream: PGMQ queue "%" not auto-attached: %', p_queue, SQLERRM;
    RETURN false;
  END;
  RETURN true;
END $$;

-- attach_matching hooks every PGMQ queue that pgbus_stream.auto_attach
-- matches and that is not attached yet (CREATE EXTENSION runs it; run it
-- after widening the setting); returns how many it hooked.
CREATE FUNCTION @extschema@.attach_matching() RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  q text;
  n integer := 0;
BEGIN
  FOR q IN SELECT substr(c.relname, 3) FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
            WHERE ns.nspname = 'pgmq' AND c.relkind IN ('r', 'p') AND c.relname LIKE 'q\_%'
              AND NOT c.relispartition ORDER BY c.relname LOOP
    IF @extschema@._auto_attach_match(q) AND @extschema@._auto_attach(q) THEN
      n := n + 1;
    END IF;
  END LOOP;
  RETURN n;
END $$;

-- _on_create_table (event trigger, ddl_command_end of CREATE TABLE) hooks a
-- new pgmq.q_<queue> that auto_attach matches, and records a new
-- pgmq.a_<queue> as the archive of its stream if it can be one and has the
-- queue's owner (retention moves the queue's rows there as that owner).
-- pgmq.create() runs as the application's role, hence SECURITY DEFINER.
CREATE FUNCTION @extschema@._on_create_table() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  rel oid;
  t text;
  queue regclass;
  problem text;
BEGIN
  FOR rel IN SELECT d.objid FROM pg_event_trigger_ddl_commands() d
              WHERE d.classid = 'pg_class'::regclass AND d.schema_name = 'pgmq' AND d.object_type = 'table' LOOP
    -- one index lookup per new table (a join may scan all of pg_class)
    SELECT c.relname INTO t FROM pg_class c WHERE c.oid = rel AND NOT c.relispartition;
    IF t IS NULL OR t !~ '^[qa]_' THEN
      CONTINUE;
    END IF;
    IF starts_with(t, 'q_') THEN
      IF @extschema@._auto_attach_match(substr(t, 3)) THEN
        PERFORM @extschema@._auto_attach(substr(t, 3));
      END IF;
    ELSIF EXISTS (SELECT 1 FROM @extschema@.streams WHERE queue_schema = 'pgmq'
                     AND queue_table = 'q_' || substr(t, 3) AND archive_table IS NULL) THEN
      queue := to_regclass(format('pgmq.%I', 'q_' || substr(t, 3)));
      problem := coalesce(@extschema@._queue_problem(rel),
                          CASE WHEN (SELECT relowner FROM pg_class WHERE oid = rel)
                                    IS DISTINCT FROM (SELECT relowner FROM pg_class WHERE oid = queue)
                               THEN 'it belongs to another role than the queue' END);
      IF problem IS NULL THEN
        UPDATE @extschema@.streams SET archive_table = t
         WHERE queue_schema = 'pgmq' AND queue_table = 'q_' || substr(t, 3) AND archive_table IS NULL;
      ELSE
        RAISE WARNING 'pgbus_stream: pgmq.% is not taken as the archive of pgmq.%: %', t, 'q_' || substr(t, 3), problem;
      END IF;
    END IF;
  END LOOP;
END $$;
REVOKE ALL ON FUNCTION @extschema@._on_create_table() FROM PUBLIC;

-- _on_drop (event trigger, sql_drop) forgets the streams whose queue table
-- was dropped (pgmq.drop_queue, DROP TABLE, DROP SCHEMA pgmq CASCADE).
CREATE FUNCTION @extschema@._on_drop() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE n integer;
BEGIN
  IF to_regclass('@extschema@.streams') IS NULL THEN
    RETURN;  -- the extension itself is being dropped
  END IF;
  WITH gone AS (
    DELETE FROM @extschema@.streams s USING pg_event_trigger_dropped_objects() d
     WHERE d.object_type = 'table' AND d.schema_name = s.queue_schema AND d.object_name = s.queue_table
    RETURNING s.name),
  subs AS (DELETE FROM @extschema@.subscribers b USING gone WHERE b.stream = gone.name)
  SELECT count(*) INTO n FROM gone;
  IF n > 0 THEN
    PERFORM @extschema@._catalog_changed(NULL);
  END IF;
END $$;
REVOKE ALL ON FUNCTION @extschema@._on_drop() FROM PUBLIC;

CREATE EVENT TRIGGER pgbus_stream_auto_attach ON ddl_command_end WHEN TAG IN ('CREATE TABLE')
  EXECUTE FUNCTION @extschema@._on_create_table();
CREATE EVENT TRIGGER pgbus_stream_forget_dropped ON sql_drop
  EXECUTE FUNCTION @extschema@._on_drop();

SELECT @extschema@.attach_matching();

-- ---- Access control -------------------------------------------------------

-- set_public makes a stream readable without a credential (true) or private.
CREATE FUNCTION @extschema@.set_public(name text, public boolean) RETURNS void LANGUAGE plpgsql AS $$
DECLARE s @extschema@.streams := @extschema@._stream(name);
BEGIN
  IF public IS NULL THEN
    RAISE EXCEPTION 'pgbus_stream: public must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  UPDATE @extschema@.streams SET public = set_public.public WHERE id = s.id;
  PERFORM @extschema@._catalog_changed(s.id);
END $$;

-- sign_token mints an HS256 JWT with pgbus_stream.jwt_secret: streams
-- (names or patterns such as 'chat:*'), valid for ttl, with an optional
-- subscriber identity (sub) and audience context (ctx, a JSON object).
CREATE FUNCTION @extschema@.sign_token(streams text[], ttl interval, sub text DEFAULT NULL,
                                       ctx jsonb DEFAULT NULL) RETURNS text
  AS 'MODULE_PATHNAME', 'pgbus_stream_sign_token' LANGUAGE C;
REVOKE ALL ON FUNCTION @extschema@.sign_token(text[], interval, text, jsonb) FROM PUBLIC;

-- Audiences: a message broadcast with visible_to => label reaches a
-- connection only if the label's rule (a jsonpath) matches the connection's
-- context (the ctx claim of its JWT). The workers read the rules again when
-- a definition commits.
CREATE TABLE @extschema@.audiences (
  label      text PRIMARY KEY CHECK (@extschema@._wire_valid('event_name', label)),
  rule       jsonpath NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now()
);
SELECT pg_catalog.pg_extension_config_dump('@extschema@.audiences', '');
REVOKE ALL ON @extschema@.audiences FROM PUBLIC;

-- define_audience creates or replaces the rule of an audience label.
CREATE FUNCTION @extschema@.define_audience(label text, rule jsonpath) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  IF NOT @extschema@._wire_valid('event_name', label) THEN
    RAISE EXCEPTION 'pgbus_stream: invalid audience label %', quote_nullable(label)
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Labels are 1 to 64 printable ASCII characters without spaces.';
  END IF;
  IF rule IS NULL THEN
    RAISE EXCEPTION 'pgbus_stream: audience rule must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  INSERT INTO @extschema@.audiences (label, rule) VALUES (define_audience.label, define_audience.rule)
  ON CONFLICT ON CONSTRAINT audiences_pkey DO UPDATE SET rule = EXCLUDED.rule, updated_at = now();
  PERFORM @extschema@._catalog_changed(NULL); -- the workers read the rules again at commit
END $$;

-- drop_audience removes an audience: its messages then reach no one.
CREATE FUNCTION @extschema@.drop_audience(label text) RETURNS void LANGUAGE sql AS $$
  DELETE FROM @extschema@.audiences a WHERE a.label = drop_audience.label;
  SELECT @extschema@._catalog_changed(NULL);
$$;

-- Live figures show subscriber ids, client addresses and private stream
-- names: superusers and members of pgbus_stream_monitor (which pg_monitor
-- members are) only.
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pgbus_stream_monitor') THEN
    CREATE ROLE pgbus_stream_monitor NOLOGIN;
  END IF;
END $$;
GRANT pgbus_stream_monitor TO pg_monitor;
REVOKE ALL ON FUNCTION @extschema@.connections(), @extschema@.diagnostics(), @extschema@.stats(),
  @extschema@.alerts(), @extschema@.workers(), @extschema@._stream_stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.connections(), @extschema@.diagnostics(), @extschema@.stats(),
  @extschema@.alerts(), @extschema@.workers(), @extschema@._stream_stats(),
  @extschema@._oldest_id(@extschema@.streams) TO pgbus_stream_monitor;
GRANT USAGE ON SCHEMA @extschema@ TO pgbus_stream_monitor;
GRANT SELECT ON @extschema@.streams, @extschema@.subscribers, @extschema@.stream_stats,
  @extschema@.audiences TO pgbus_stream_monitor;
REVOKE ALL ON FUNCTION @extschema@.replication() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.replication() TO pgbus_stream_monitor;


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
