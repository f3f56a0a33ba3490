-- pgbus_stream 0.2.0 -> 0.3.0 (ALTER EXTENSION pgbus_stream UPDATE).
-- Every change made to pgbus_stream--0.3.0.sql is repeated here, so that a
-- database created with 0.2.0 ends with the same objects as a fresh 0.3.0.
\echo Use "ALTER EXTENSION pgbus_stream UPDATE" to load this file. \quit

-- ---- Hostile inputs: capped error echoes, broadcast ids, robust row reads ----
-- _echo caps what errors quote of an argument; _draw_id gives broadcast() its
-- msg_id on a queue not hooked yet; _rows_sql clamps enqueued_at and gives
-- each message whole (the worker reads its fields, detoasting it once).
CREATE FUNCTION @extschema@._echo(t text) RETURNS text
  AS 'MODULE_PATHNAME', 'pgbus_stream_echo' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- _wire_valid says whether a text is a valid event name ('event_name', also
-- audience labels) or connection id ('connection_id'): the rules of the wire
-- format (src/core/wire.hpp), the same code the workers run.
CREATE FUNCTION @extschema@._wire_valid(kind text, value text) RETURNS boolean
  AS 'MODULE_PATHNAME', 'pgbus_stream_wire_valid' LANGUAGE C IMMUTABLE PARALLEL SAFE;

CREATE FUNCTION @extschema@._draw_id(stream_id bigint, queue regclass) RETURNS bigint
  AS 'MODULE_PATHNAME', 'pgbus_stream_draw_id' LANGUAGE C STRICT;

CREATE OR REPLACE FUNCTION @extschema@._check_stream_name(name text) RETURNS void
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

CREATE OR REPLACE FUNCTION @extschema@.create_stream(name text, public boolean DEFAULT false,
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

CREATE OR REPLACE FUNCTION @extschema@.attach(queue_name text, stream_name text DEFAULT NULL,
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

CREATE OR REPLACE FUNCTION @extschema@._stream(p_name text) RETURNS @extschema@.streams
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

CREATE OR REPLACE FUNCTION @extschema@.broadcast(stream text, data text, event text DEFAULT NULL,
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

-- ---- One home for the wire format's rules (src/core/wire.hpp) ---------------
-- Audience labels follow the event-name rule, checked by _wire_valid.
ALTER TABLE @extschema@.audiences DROP CONSTRAINT audiences_label_check,
  ADD CONSTRAINT audiences_label_check CHECK (@extschema@._wire_valid('event_name', label));

CREATE OR REPLACE FUNCTION @extschema@.define_audience(label text, rule jsonpath) RETURNS void
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

CREATE OR REPLACE FUNCTION @extschema@._rows_sql(s @extschema@.streams) RETURNS text
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

-- Code a table owner controls never runs with the workers' rights: one rule
-- for what a queue (or archive) table may be, checked by attach(),
-- create_stream(), auto-attach and the hook; stats() reads no table that is
-- not one; retention is run by the workers themselves, as the queue's owner
-- (it was _apply_retention(), run with the workers' rights).
-- _queue_problem says why a table cannot be taken as a queue (or archive)
-- table, or NULL when it can: a plain or partitioned table without rules,
-- with PGMQ's columns (msg_id bigint, read_ct integer, enqueued_at and vt
-- timestamptz, message jsonb; headers, if present, jsonb), whose partitions
-- are plain tables of the same owner without rules. The workers check the
-- same before each statement on a queue: its owner may change it any time.
CREATE FUNCTION @extschema@._queue_problem(rel regclass) RETURNS text
  AS 'MODULE_PATHNAME', 'pgbus_stream_queue_problem' LANGUAGE C STABLE STRICT;

CREATE OR REPLACE FUNCTION @extschema@._hook(p_name text, p_queue text, p_schema text, p_table text,
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


CREATE OR REPLACE FUNCTION @extschema@._hook_triggers(stream_id bigint) RETURNS void
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

CREATE OR REPLACE FUNCTION @extschema@._oldest_id(s @extschema@.streams) RETURNS bigint
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

DROP FUNCTION @extschema@._apply_retention(bigint, int);
-- _on_create_table (event trigger, ddl_command_end of CREATE TABLE) hooks a
-- new pgmq.q_<queue> that auto_attach matches, and records a new
-- pgmq.a_<queue> as the archive of its stream if it can be one and has the
-- queue's owner (retention moves the queue's rows there as that owner).
-- pgmq.create() runs as the application's role, hence SECURITY DEFINER.
CREATE OR REPLACE FUNCTION @extschema@._on_create_table() RETURNS event_trigger
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

-- ---- One vocabulary for the figures (README, "Glossary of figures") ------

-- stats(), workers() and connections() take the glossary's names: queued,
-- written, bytes_queued, retention_removed, overflow_dropped. Their result
-- types change, so they are dropped and made again; 0.2.0's names stay as
-- extra columns at the end with the same values, for one version.
DROP FUNCTION @extschema@.stats();
DROP FUNCTION @extschema@.workers();
DROP FUNCTION @extschema@.connections();
DROP FUNCTION @extschema@._stream_stats();

CREATE FUNCTION @extschema@._stream_stats(
  OUT stream_id bigint, OUT subscribers bigint, OUT emitted bigint, OUT queued bigint,
  OUT overflow_dropped bigint, OUT failed bigint, OUT bytes_queued bigint, OUT newest_id bigint,
  OUT latency_p50_ms float8, OUT latency_p99_ms float8, OUT retention_removed bigint, OUT horizon bigint)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'pgbus_stream_stream_stats' LANGUAGE C;

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
REVOKE ALL ON FUNCTION @extschema@.connections(), @extschema@.stats(), @extschema@.workers(),
  @extschema@._stream_stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.connections(), @extschema@.stats(), @extschema@.workers(),
  @extschema@._stream_stats() TO pgbus_stream_monitor;
