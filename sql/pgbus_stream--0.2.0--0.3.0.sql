-- pgbus_stream 0.2.0 -> 0.3.0 (ALTER EXTENSION pgbus_stream UPDATE).
-- Every change made to pgbus_stream--0.3.0.sql is repeated here, so that a
-- database created with 0.2.0 ends with the same objects as a fresh 0.3.0.
\echo Use "ALTER EXTENSION pgbus_stream UPDATE" to load this file. \quit

-- ---- Hostile inputs: capped error echoes, broadcast ids, robust row reads ----
-- _echo caps what errors quote of an argument; _draw_id gives broadcast() its
-- msg_id on a queue not hooked yet; _rows_sql clamps enqueued_at.
CREATE FUNCTION @extschema@._echo(t text) RETURNS text
  AS 'MODULE_PATHNAME', 'pgbus_stream_echo' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

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

CREATE OR REPLACE FUNCTION @extschema@._rows_sql(s @extschema@.streams) RETURNS text
LANGUAGE sql STABLE AS $$
  SELECT format($q$SELECT msg_id,
      CASE WHEN jsonb_typeof(message) = 'object' AND message ? 'html' THEN message->>'html'
           ELSE message::text END,
      CASE WHEN jsonb_typeof(message) = 'object' THEN message->>'event' END,
      CASE WHEN jsonb_typeof(message) = 'object' THEN message->>'visible_to' END,
      least(greatest(extract(epoch FROM enqueued_at) * 1000000, -9223372036854775808),
            9223372036854775807)::bigint,
      CASE WHEN jsonb_typeof(message) = 'object' THEN message->>'exclude' END
    FROM (SELECT msg_id, message, enqueued_at FROM %I.%I %s) m$q$,
    s.queue_schema, s.queue_table,
    CASE WHEN s.archive_table IS NOT NULL AND to_regclass(format('%I.%I', s.queue_schema, s.archive_table)) IS NOT NULL
         THEN format('UNION ALL SELECT msg_id, message, enqueued_at FROM %I.%I', s.queue_schema, s.archive_table)
         ELSE '' END)
$$;

