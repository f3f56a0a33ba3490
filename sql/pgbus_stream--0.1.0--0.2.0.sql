-- pgbus_stream 0.1.0 -> 0.2.0 (ALTER EXTENSION pgbus_stream UPDATE).
-- Every change made to pgbus_stream--0.2.0.sql is repeated here, so that a
-- database created with 0.1.0 ends with the same objects as a fresh 0.2.0.
\echo Use "ALTER EXTENSION pgbus_stream UPDATE" to load this file. \quit

-- Private by default: new streams need a credential (existing ones keep their flag).
ALTER TABLE @extschema@.streams ALTER COLUMN public SET DEFAULT false;
REVOKE ALL ON FUNCTION @extschema@._capture() FROM PUBLIC;
DROP FUNCTION @extschema@.create_stream(text, boolean, interval);
DROP FUNCTION @extschema@.attach(text, text, boolean);
DROP FUNCTION @extschema@.broadcast(text, text, text, text, boolean);
DROP FUNCTION @extschema@._publish_ephemeral(bigint, regclass, text, text, text);

-- create_stream makes a queue for a stream (a PGMQ queue when PGMQ is
-- installed, else a built-in table with PGMQ's layout) and hooks it.
CREATE FUNCTION @extschema@.create_stream(name text, public boolean DEFAULT false,
                                          retention interval DEFAULT NULL)
RETURNS @extschema@.streams LANGUAGE plpgsql AS $$
DECLARE
  prefix text := coalesce(current_setting('pgbus_stream.queue_prefix', true), 'pgbus_');
  queue text;
  maxlen int;
BEGIN
  PERFORM @extschema@._check_stream_name(name);
  maxlen := 47 - length(prefix);  -- PGMQ's limit on queue names
  IF length(name) > maxlen THEN
    RAISE EXCEPTION 'pgbus_stream: stream name "%" is too long (% characters, at most % with queue prefix "%")',
      name, length(name), maxlen, prefix USING ERRCODE = 'name_too_long';
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
  prefix text := coalesce(current_setting('pgbus_stream.queue_prefix', true), 'pgbus_');
  sname text := stream_name;
  qschema text;
BEGIN
  IF queue_name IS NULL OR queue_name = '' THEN
    RAISE EXCEPTION 'pgbus_stream: queue name must not be empty' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF sname IS NULL THEN
    sname := CASE WHEN prefix <> '' AND starts_with(queue_name, prefix) AND length(queue_name) > length(prefix)
                  THEN substr(queue_name, length(prefix) + 1) ELSE queue_name END;
  END IF;
  PERFORM @extschema@._check_stream_name(sname);
  IF to_regclass(format('pgmq.%I', 'q_' || queue_name)) IS NOT NULL THEN
    qschema := 'pgmq';
  ELSIF to_regclass(format('@extschema@.%I', 'q_' || queue_name)) IS NOT NULL THEN
    qschema := '@extschema@';
  ELSE
    RAISE EXCEPTION 'pgbus_stream: queue "%" not found (no table pgmq.q_% or @extschema@.q_%)',
      queue_name, queue_name, queue_name USING ERRCODE = 'undefined_table';
  END IF;
  RETURN @extschema@._hook(sname, queue_name, qschema, 'q_' || queue_name, 'a_' || queue_name,
                           CASE WHEN qschema = 'pgmq' THEN 'pgmq' ELSE 'builtin' END, public, NULL);
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
BEGIN
  IF data IS NULL THEN
    RAISE EXCEPTION 'pgbus_stream: broadcast data must not be NULL' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  IF event IS NOT NULL AND event !~ '^[!-~]{1,64}$' THEN
    RAISE EXCEPTION 'pgbus_stream: invalid event name %', quote_literal(event)
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Event names are 1 to 64 printable ASCII characters without spaces or line breaks.';
  END IF;
  IF exclude IS NOT NULL AND exclude !~ '^[0-9a-f]{16}$' THEN
    RAISE EXCEPTION 'pgbus_stream: invalid connection id %', quote_literal(exclude)
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Use the connectionId of a pgbus:connected event (16 hex digits).';
  END IF;
  IF NOT has_table_privilege(t.queue, 'INSERT') THEN
    RAISE EXCEPTION 'pgbus_stream: permission denied to broadcast to stream "%"', stream
      USING ERRCODE = 'insufficient_privilege',
            HINT = format('GRANT INSERT ON %s TO the publishing role.', t.queue);
  END IF;
  IF durable IS NOT TRUE THEN
    RETURN @extschema@._publish(t.stream_id, t.queue, data, event, visible_to, exclude);
  END IF;
  EXECUTE format('INSERT INTO %s (vt, message) VALUES (clock_timestamp(), $1)', t.queue)
    USING jsonb_strip_nulls(jsonb_build_object('html', data, 'event', event, 'visible_to', visible_to,
                                               'exclude', exclude));
  RETURN @extschema@._captured_id();
END $$;

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
  label      text PRIMARY KEY CHECK (label ~ '^[!-~]{1,64}$'),
  rule       jsonpath NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now()
);
SELECT pg_catalog.pg_extension_config_dump('@extschema@.audiences', '');
REVOKE ALL ON @extschema@.audiences FROM PUBLIC;

-- define_audience creates or replaces the rule of an audience label.
CREATE FUNCTION @extschema@.define_audience(label text, rule jsonpath) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  IF label IS NULL OR label !~ '^[!-~]{1,64}$' THEN
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

-- _rows_sql builds the worker's query for a stream's rows: queue and archive,
-- envelope fields extracted (any other JSON is sent as its text).
CREATE OR REPLACE FUNCTION @extschema@._rows_sql(s @extschema@.streams) RETURNS text
LANGUAGE sql STABLE AS $$
  SELECT format($q$SELECT msg_id,
      CASE WHEN jsonb_typeof(message) = 'object' AND message ? 'html' THEN message->>'html'
           ELSE message::text END,
      CASE WHEN jsonb_typeof(message) = 'object' THEN message->>'event' END,
      CASE WHEN jsonb_typeof(message) = 'object' THEN message->>'visible_to' END,
      (extract(epoch FROM enqueued_at) * 1000000)::bigint,
      CASE WHEN jsonb_typeof(message) = 'object' THEN message->>'exclude' END
    FROM (SELECT msg_id, message, enqueued_at FROM %I.%I %s) m$q$,
    s.queue_schema, s.queue_table,
    CASE WHEN s.archive_table IS NOT NULL AND to_regclass(format('%I.%I', s.queue_schema, s.archive_table)) IS NOT NULL
         THEN format('UNION ALL SELECT msg_id, message, enqueued_at FROM %I.%I', s.queue_schema, s.archive_table)
         ELSE '' END)
$$;
