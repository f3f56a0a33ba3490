# 076_hostile_shapes: what a table owner or a client can send that once
# crashed a process.
#
# A queue table whose owner retypes a column capture reads (message to text,
# msg_id to numeric) has its inserts refused with a clear error, also after
# capture already read the table in the same backend (the relcache
# invalidation drops what it knew); renamed and dropped columns fail
# statements, never a process. A signed name whose gem normalisation is
# empty (":", "...", "/", "-", "é") gets 400 on both routes, the worker keeps
# its other connections, and SQL says the stream does not exist in words.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use MIME::Base64 qw(encode_base64);
use Digest::SHA qw(hmac_sha256_hex);
use PgbusNode qw(sql_literal);

my $RAW = 'hostile-shapes-secret';
my $pg = PgbusNode->new('shapes',
	conf => "pgbus_stream.signing_secret = '$RAW'\n");

sub q1 { return $pg->safe_psql('postgres', $_[0]) }

sub err_of
{
	my ($sql) = @_;
	my ($rc, $out, $err) = $pg->psql('postgres', $sql);
	return $rc == 0 ? undef : $err;
}

sub signed
{
	my $data = encode_base64('"' . $_[0] . '"', '');
	return "$data--" . hmac_sha256_hex($data, $RAW);
}

sub alive
{
	my ($rc) = $pg->psql('postgres', 'SELECT 1');
	return $rc == 0;
}

# ---- a retyped message column ----
$pg->create_stream('retyped');
my $watch = $pg->open_stream('retyped');
is($watch->status, 200, 'a subscriber watches the stream (capture copies payloads)');
my $q = 'pgbus_stream.q_pgbus_retyped';
my $first = $pg->broadcast('retyped', 'before');
ok($watch->wait_for_data_events(1, 10), 'a row before the change arrives');

# One session: capture has read the table's shape already when the ALTER comes.
my $err = err_of("INSERT INTO $q (message) VALUES ('{\"html\":\"x\"}');"
	  . "ALTER TABLE $q ALTER COLUMN message TYPE text;"
	  . "INSERT INTO $q (message) VALUES ('plain text');");
like($err // '', qr/column message of queue table "q_pgbus_retyped" is of type text, not jsonb/,
	'message retyped to text in the same session: the next insert is refused with a clear error');
ok(alive(), 'the server is up (no crash)');
$err = err_of("INSERT INTO $q (message) VALUES ('{\"html\":\"y\"}')");
like($err // '', qr/is of type text, not jsonb/, 'a new session is refused the same way');
$err = err_of("SELECT pgbus_stream.broadcast('retyped', 'z')");
ok(defined $err, 'broadcast() fails with an error') or diag('no error');
ok(alive(), 'the server is still up');
q1("DELETE FROM $q WHERE message = 'plain text'");
q1("ALTER TABLE $q ALTER COLUMN message TYPE jsonb USING message::jsonb");
my $after = $pg->broadcast('retyped', 'after');
ok($after > 0, 'the type restored: broadcast() works again');
ok($watch->wait_until(sub { grep { ($_->{data} // '') eq 'after' } $_[0]->data_events }, 10),
	'and its row reaches the subscriber');

# ---- a retyped msg_id ----
$pg->create_stream('retyped_id');
my $qi = 'pgbus_stream.q_pgbus_retyped_id';
$err = err_of("SELECT pgbus_stream.broadcast('retyped_id', 'a');"
	  . "ALTER TABLE $qi ALTER COLUMN msg_id DROP IDENTITY;"
	  . "ALTER TABLE $qi ALTER COLUMN msg_id TYPE numeric;"
	  . "INSERT INTO $qi (msg_id, message) VALUES (1e30, '{\"html\":\"n\"}');");
like($err // '', qr/column msg_id of queue table "q_pgbus_retyped_id" is of type numeric, not bigint/,
	'msg_id retyped to numeric: the insert is refused with a clear error');
ok(alive(), 'the server is up');

# ---- renamed and dropped columns ----
$pg->create_stream('renamed');
my $qr = 'pgbus_stream.q_pgbus_renamed';
$pg->broadcast('renamed', 'one');
q1("ALTER TABLE $qr RENAME COLUMN message TO body");
ok(defined err_of("SELECT pgbus_stream.broadcast('renamed', 'two')"),
	'message renamed: broadcast() fails with an error');
is(err_of("INSERT INTO $qr (body) VALUES ('{\"html\":\"b\"}')"), undef,
	'an insert without a message column is captured (its row is read by the worker)');
q1("ALTER TABLE $qr RENAME COLUMN msg_id TO id");
like(err_of("INSERT INTO $qr (body) VALUES ('{}')") // '', qr/has no msg_id column/,
	'msg_id renamed: the insert is refused');
q1("ALTER TABLE $qr RENAME COLUMN id TO msg_id");
q1("ALTER TABLE $qr DROP COLUMN body");
is(err_of("INSERT INTO $qr DEFAULT VALUES"), undef, 'message dropped: an insert still works');
ok(alive(), 'the server is up after renames and drops');

# ---- signed names the gem normalises to nothing ----
my $other = $pg->open_stream('retyped');
is($other->status, 200, 'a connection that must survive');
my @pids = $pg->worker_pids;
for my $name (':', '...', '/', '-', 'é')
{
	my $tok = signed($name);
	(my $shown = $name) =~ s/[^ -~]/?/g;
	for my $path ("/pgbus/streams/$tok", "/streams/$tok")
	{
		my $c = $pg->sse($path);
		my $st = $c->status;
		my $body = $c->body // '';
		$c->close;
		is($st, 400, "signed \"$shown\" on " . ($path =~ m{^/pgbus} ? 'the gem route' : '/streams/') . ': 400');
		like($body, qr/maps to no stream name/, 'with a reason') if $st == 400;
	}
}
is_deeply([ $pg->worker_pids ], \@pids, 'the worker did not restart');
$pg->broadcast('retyped', 'still');
ok($other->wait_until(sub { grep { ($_->{data} // '') eq 'still' } $_[0]->data_events }, 10),
	'the other connection stayed open and gets new rows');
ok(!$other->closed, 'and was never closed');

for my $name (':', '...', '/', '-', 'é')
{
	my $e = err_of('SELECT * FROM pgbus_stream._broadcast_target(' . sql_literal($name) . ')') // '';
	like($e, qr/pgbus_stream: stream ".*" does not exist/, "_broadcast_target('$name'): does not exist");
	unlike($e, qr/basic_string|substr|out_of_range|std::/, 'no C++ message');
	my $qe = err_of('SELECT pgbus_stream.queue_name(' . sql_literal($name) . ')') // '';
	like($qe, qr/pgbus_stream: .*no queue name|maps to no queue/, "queue_name('$name'): a clear error");
}

$pg->finish;
done_testing();
