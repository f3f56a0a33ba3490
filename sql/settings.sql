-- The settings as PostgreSQL shows them (src/settings/): boot values,
-- contexts, bounds and flags are pinned here, so that moving a definition
-- cannot change what SHOW and pg_settings say. A new setting adds its row.
\set VERBOSITY terse
SELECT name, boot_val, context, vartype, unit, min_val, max_val, enumvals,
       pg_settings_get_flags(name) AS flags
  FROM pg_settings WHERE name LIKE 'pgbus_stream.%' ORDER BY name;

-- The keys and the operators' token: out of pg_settings and SHOW ALL, and
-- readable by superusers only.
SELECT count(*) AS listed FROM pg_settings
 WHERE name IN ('pgbus_stream.admin_token', 'pgbus_stream.signing_secret',
                'pgbus_stream.secret_key_base', 'pgbus_stream.jwt_secret',
                'pgbus_stream.token_cookie');
CREATE ROLE pgbus_settings_plain;
SET ROLE pgbus_settings_plain;
-- The refusal by its code, 42501 (insufficient_privilege): its wording
-- changed in PostgreSQL 16.
\set VERBOSITY sqlstate
SHOW pgbus_stream.admin_token;
SHOW pgbus_stream.signing_secret;
SHOW pgbus_stream.secret_key_base;
SHOW pgbus_stream.jwt_secret;
SHOW pgbus_stream.token_cookie;
\set VERBOSITY terse
SHOW pgbus_stream.overflow_policy;
SET pgbus_stream.max_pending_events = 100;
SET pgbus_stream.queue_prefix = 'x_';
RESET ROLE;
DROP ROLE pgbus_settings_plain;

-- Check hooks refuse what they always refused (nothing is written).
ALTER SYSTEM SET pgbus_stream.default_event = 'two words';
ALTER SYSTEM SET pgbus_stream.auto_attach = 'bad-name';
ALTER SYSTEM SET pgbus_stream.overflow_policy = 'lagging';
