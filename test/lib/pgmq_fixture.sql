-- A PGMQ-shaped schema for tests (PGMQ itself is not packaged for Debian).
-- It has the effects of PGMQ 1.x that pgbus_stream and the pgbus gem rely
-- on: pgmq.meta, pgmq.create() making pgmq.q_<name> and pgmq.a_<name> with
-- PGMQ's columns (table names lower-cased, at most 47 characters),
-- pgmq.send()/send_batch() inserting into the queue, pgmq.drop_queue()
-- dropping both tables, and pgmq.enable_notify_insert() installing the
-- per-row NOTIFY trigger with its throttle table that the gem turns on for
-- stream queues (disable_notify_insert() removes it). Not an extension:
-- plain objects in schema pgmq.
CREATE SCHEMA IF NOT EXISTS pgmq;

CREATE TABLE IF NOT EXISTS pgmq.meta (
  queue_name     varchar UNIQUE NOT NULL,
  is_partitioned boolean NOT NULL,
  is_unlogged    boolean NOT NULL,
  created_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS pgmq.notify_insert_throttle (
  queue_name           varchar UNIQUE NOT NULL,
  throttle_interval_ms integer NOT NULL DEFAULT 0,
  last_notified_at     timestamptz NOT NULL DEFAULT to_timestamp(0)
);

CREATE OR REPLACE FUNCTION pgmq.format_table_name(queue_name text, prefix text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF queue_name ~ '\$|;|--|''' THEN
    RAISE EXCEPTION 'queue name contains invalid characters: $, ;, --, or ''';
  END IF;
  RETURN lower(prefix || '_' || queue_name);
END $$;

CREATE OR REPLACE FUNCTION pgmq.validate_queue_name(queue_name text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  IF length(queue_name) > 47 THEN
    RAISE EXCEPTION 'queue name is too long, maximum length is 47 characters';
  END IF;
END $$;

CREATE OR REPLACE FUNCTION pgmq.create(queue_name text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  q text := pgmq.format_table_name(queue_name, 'q');
  a text := pgmq.format_table_name(queue_name, 'a');
BEGIN
  PERFORM pgmq.validate_queue_name(queue_name);
  PERFORM pg_advisory_xact_lock(hashtext('pgmq.create' || lower(queue_name)));
  EXECUTE format($f$CREATE TABLE IF NOT EXISTS pgmq.%I (
      msg_id bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY,
      read_ct integer NOT NULL DEFAULT 0,
      enqueued_at timestamptz NOT NULL DEFAULT now(),
      last_read_at timestamptz,
      vt timestamptz NOT NULL,
      message jsonb,
      headers jsonb)$f$, q);
  EXECUTE format($f$CREATE TABLE IF NOT EXISTS pgmq.%I (
      msg_id bigint PRIMARY KEY,
      read_ct integer NOT NULL DEFAULT 0,
      enqueued_at timestamptz NOT NULL DEFAULT now(),
      last_read_at timestamptz,
      archived_at timestamptz NOT NULL DEFAULT now(),
      vt timestamptz NOT NULL,
      message jsonb,
      headers jsonb)$f$, a);
  EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON pgmq.%I (vt ASC)', q || '_vt_idx', q);
  EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON pgmq.%I (archived_at)', 'archived_at_idx_' || queue_name, a);
  INSERT INTO pgmq.meta (queue_name, is_partitioned, is_unlogged)
  VALUES (queue_name, false, false) ON CONFLICT DO NOTHING;
END $$;

CREATE OR REPLACE FUNCTION pgmq.send(queue_name text, msg jsonb, headers jsonb DEFAULT NULL,
                                     delay integer DEFAULT 0) RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
BEGIN
  RETURN QUERY EXECUTE format(
    'INSERT INTO pgmq.%I (vt, message, headers) VALUES (clock_timestamp() + make_interval(secs => $1), $2, $3) RETURNING msg_id',
    pgmq.format_table_name(queue_name, 'q')) USING delay, msg, headers;
END $$;

CREATE OR REPLACE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[], headers jsonb[] DEFAULT NULL,
                                           delay integer DEFAULT 0) RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
BEGIN
  RETURN QUERY EXECUTE format(
    'INSERT INTO pgmq.%I (vt, message, headers)
     SELECT clock_timestamp() + make_interval(secs => $1), m, $3[o] FROM unnest($2) WITH ORDINALITY u(m, o)
     RETURNING msg_id',
    pgmq.format_table_name(queue_name, 'q')) USING delay, msgs, headers;
END $$;

CREATE OR REPLACE FUNCTION pgmq.drop_queue(queue_name text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE format('DROP TABLE IF EXISTS pgmq.%I', pgmq.format_table_name(queue_name, 'q'));
  EXECUTE format('DROP TABLE IF EXISTS pgmq.%I', pgmq.format_table_name(queue_name, 'a'));
  DELETE FROM pgmq.meta m WHERE m.queue_name = drop_queue.queue_name;
  DELETE FROM pgmq.notify_insert_throttle t WHERE t.queue_name = drop_queue.queue_name;
  RETURN true;
END $$;

-- The per-row NOTIFY of PGMQ's enable_notify_insert(): every insert updates
-- (and so row-locks) the queue's throttle row, then notifies.
CREATE OR REPLACE FUNCTION pgmq.notify_queue_listeners() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  qname text := substr(TG_TABLE_NAME, 3);
  n int;
BEGIN
  UPDATE pgmq.notify_insert_throttle
     SET last_notified_at = clock_timestamp()
   WHERE queue_name = qname
     AND clock_timestamp() - last_notified_at >= make_interval(secs => throttle_interval_ms / 1000.0);
  GET DIAGNOSTICS n = ROW_COUNT;
  IF n > 0 THEN
    PERFORM pg_notify('pgmq.' || TG_TABLE_NAME || '.' || TG_OP, NULL);
  END IF;
  RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION pgmq.enable_notify_insert(queue_name text, throttle_interval_ms integer DEFAULT 250)
RETURNS void LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE q text := pgmq.format_table_name(queue_name, 'q');
BEGIN
  INSERT INTO pgmq.notify_insert_throttle (queue_name, throttle_interval_ms)
  VALUES (lower(enable_notify_insert.queue_name), enable_notify_insert.throttle_interval_ms)
  ON CONFLICT (queue_name) DO UPDATE SET throttle_interval_ms = excluded.throttle_interval_ms;
  EXECUTE format('DROP TRIGGER IF EXISTS trigger_notify_queue_insert_listeners ON pgmq.%I', q);
  EXECUTE format('CREATE CONSTRAINT TRIGGER trigger_notify_queue_insert_listeners AFTER INSERT ON pgmq.%I '
                 'DEFERRABLE FOR EACH ROW EXECUTE FUNCTION pgmq.notify_queue_listeners()', q);
END $$;

CREATE OR REPLACE FUNCTION pgmq.disable_notify_insert(queue_name text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE format('DROP TRIGGER IF EXISTS trigger_notify_queue_insert_listeners ON pgmq.%I',
                 pgmq.format_table_name(queue_name, 'q'));
  DELETE FROM pgmq.notify_insert_throttle t WHERE t.queue_name = lower(disable_notify_insert.queue_name);
END $$;
