# 008_retention: retention really removes messages (by count and by age),
# stats() counts them, and a client whose cursor is older than what is kept
# gets pgbus:gap-detected with the oldest id still there, then the rest.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use PgbusNode;

my $pg = PgbusNode->new('retention', conf => "pgbus_stream.retention_interval = 1\n");
$pg->create_stream('keep5');
$pg->safe_psql('postgres', q{SELECT pgbus_stream.set_retention('keep5', NULL, 5)});
my @ids = map { $pg->broadcast('keep5', "m$_") } 1 .. 20;

sub rows { return $pg->safe_psql('postgres', "SELECT count(*) FROM pgbus_stream.q_pgbus_$_[0]") }
my $deadline = time + 15;
sleep 0.2 while rows('keep5') > 5 && time < $deadline;
is(rows('keep5'), 5, 'max_messages: only the newest 5 rows are kept');
is($pg->safe_psql('postgres', q{SELECT retention_removed || ' ' || retention_floor FROM pgbus_stream.stats() WHERE stream = 'keep5'}),
	"15 $ids[14]", 'stats(): 15 removed, retention floor at the 15th id');

my $c = $pg->open_stream('keep5', query => "since=$ids[1]");
is($c->status, 200, 'old cursor: 200, not a dead end');
ok($c->wait_for_data_events(5, 10), 'old cursor: what is still there arrives');
$c->poll(0.3);
my @ev = grep { ($_->{event} // '') ne 'pgbus:connected' } $c->events;
is($ev[0]{event}, 'pgbus:gap-detected', 'old cursor: gap-detected comes first');
like($ev[0]{data}, qr/"reason":"retention","oldest":$ids[15]\b/, 'old cursor: gap names the oldest id kept');
is_deeply([ map { $_->{data} } $c->data_events ], [ map { "m$_" } 16 .. 20 ], 'old cursor: then m16..m20');
$c->close;

$c = $pg->open_stream('keep5', query => "since=$ids[17]");
$c->poll(0.5);
is(scalar(grep { ($_->{event} // '') eq 'pgbus:gap-detected' } $c->events), 0, 'recent cursor: no gap');
is_deeply([ map { $_->{data} } $c->data_events ], [ 'm19', 'm20' ], 'recent cursor: exactly what was missed');
$c->close;

# by age
$pg->create_stream('young');
$pg->broadcast('young', "old $_") for 1 .. 3;
$pg->safe_psql('postgres', q{SELECT pgbus_stream.set_retention('young', '1 second')});
$deadline = time + 15;
sleep 0.2 while rows('young') > 0 && time < $deadline;
is(rows('young'), 0, 'max_age: rows older than the retention are removed');
$pg->broadcast('young', 'fresh');
is(rows('young'), 1, 'max_age: a new row is kept');

# errors
my ($ret, $out, $err) = $pg->psql('postgres', q{SELECT pgbus_stream.set_retention('young', '-1 second')});
like($err, qr/max_age must be positive/, 'set_retention: negative age refused');
($ret, $out, $err) = $pg->psql('postgres', q{SELECT pgbus_stream.set_retention('nope', '1 day')});
like($err, qr/does not exist/, 'set_retention: unknown stream refused');

$pg->finish;
done_testing();
