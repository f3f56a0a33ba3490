# 045_access_lifecycle: who may use a stored cursor, and what the workers
# serve once the extension is dropped (issue 26, points 9 and 10).
#
# A. A stored subscriber cursor is read and written only with a credential
#    whose sub names it, on a public stream too: an anonymous
#    ?subscriber=alice used to resume alice's cursor and move it past what
#    alice had seen, so that her next reconnect missed those messages. Now
#    it is refused (403 with a reason), as are a token without sub and a
#    token for bob; alice's cursor stays where she left it and her reconnect
#    gets exactly what she missed.
# B. DROP EXTENSION: the workers drop their catalog. A connection on a
#    dropped stream ends, a new request for it is refused, and after CREATE
#    EXTENSION auto-attaches the PGMQ queue again as a private stream, an
#    anonymous ?replay=3 is refused and gets none of its rows.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode qw(sql_literal);

my $pg = PgbusNode->new('lifecycle', extension => 0, conf => "pgbus_stream.cursor_flush_interval = 50\n");
$pg->safe_psql('postgres', slurp_file("$FindBin::Bin/../lib/pgmq_fixture.sql"));
$pg->safe_psql('postgres', 'CREATE EXTENSION pgbus_stream');

sub q1 { return $pg->safe_psql('postgres', $_[0]) }
sub datas { return map { $_->{data} } $_[0]->data_events }

# ---- A. stored cursors need their sub ----------------------------------------
$pg->create_stream('pub');
my $stored = q{SELECT cursor FROM pgbus_stream.subscribers WHERE id = 'alice' AND stream = 'pub'};
{
	my $c = $pg->open_stream('pub', query => 'subscriber=alice');    # with a token whose sub is alice
	is($c->status, 200, 'alice (sub alice) subscribes');
	$pg->broadcast('pub', "m$_") for 1 .. 3;
	ok($c->wait_for_data_events(3, 10), 'alice gets m1..m3');
	my $last = ($c->data_events)[-1]{id};
	my $deadline = time + 10;
	sleep 0.1 while q1($stored) ne $last && time < $deadline;
	is(q1($stored), $last, 'her cursor is stored');
	$c->close;
}
my $alice_cursor = q1($stored);
$pg->broadcast('pub', "m$_") for 4 .. 5;

my $anon = $pg->sse('/streams/pub?subscriber=alice', anonymous => 1);
is($anon->status, 403, 'anonymous ?subscriber=alice on a public stream: 403');
like($anon->body, qr/credential whose sub names/, '... saying why');
is(scalar $anon->data_events, 0, '... and nothing of alice\'s stream');
$anon->close;

my $nosub = $pg->sse('/streams/pub?subscriber=alice', headers => { Authorization => 'Bearer ' . PgbusNode::jwt_all('pgbusnode-bearer-all') });
is($nosub->status, 403, 'a token without sub: 403');
$nosub->close;
my $bob = $pg->sse('/streams/pub?subscriber=alice',
	headers => { Authorization => 'Bearer ' . PgbusNode::jwt_all('pgbusnode-bearer-all', 'bob') });
is($bob->status, 403, 'a token for bob: 403');
$bob->close;
sleep 0.3;    # more than a cursor flush
is(q1($stored), $alice_cursor, 'alice\'s stored cursor did not move');

{
	my $c = $pg->open_stream('pub', query => 'subscriber=alice');
	is($c->status, 200, 'alice reconnects');
	$c->wait_for_data_events(2, 10);
	$c->poll(0.3);
	is_deeply([ datas($c) ], [ 'm4', 'm5' ], 'alice gets exactly what she missed');
	$c->close;
}
is(scalar($pg->open_stream('pub', anonymous => 1)->status), 200,
	'an anonymous reader without ?subscriber= is still served');

# ---- B. DROP EXTENSION --------------------------------------------------------
q1(q{SELECT pgmq.create('pgbus_feed')});
q1(q{SELECT pgbus_stream.set_public('feed', true)});
q1(qq{SELECT pgmq.send('pgbus_feed', jsonb_build_object('html', 'row $_'))}) for 1 .. 3;
my $live = $pg->sse('/streams/feed?replay=3', anonymous => 1);
is($live->status, 200, 'public feed: anonymous ?replay=3 is served');
ok($live->wait_for_data_events(3, 10), '... with its rows');

q1('DROP EXTENSION pgbus_stream CASCADE');
ok($live->wait_closed(10), 'DROP EXTENSION: the open connection on a dropped stream ends');
my $after_drop = $pg->sse('/streams/feed?replay=3', anonymous => 1);
isnt($after_drop->status, 200, 'a new request for the dropped stream is refused (' . $after_drop->status . ')');
is(scalar $after_drop->data_events, 0, '... with none of its rows');
$after_drop->close;

q1('CREATE EXTENSION pgbus_stream');
is(q1(q{SELECT public FROM pgbus_stream.streams WHERE name = 'feed'}), 'f',
	'CREATE EXTENSION auto-attaches the queue again, private');
my $again = $pg->sse('/streams/feed?replay=3', anonymous => 1);
is($again->status, 401, 'anonymous ?replay=3 on it: 401 (access decided from the new catalog)');
is(scalar $again->data_events, 0, '... with none of its rows');
$again->close;
my $tok = PgbusNode::jwt_all('pgbusnode-bearer-all');
my $authorised = $pg->sse('/streams/feed?replay=3', headers => { Authorization => "Bearer $tok" });
is($authorised->status, 200, 'with a credential it is served');
ok($authorised->wait_for_data_events(3, 10), '... with its rows');
$authorised->close;

$pg->finish;
done_testing();
