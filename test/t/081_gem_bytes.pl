# 081_gem_bytes: on the pgbus gem's routes (/pgbus/streams/<signed name>
# and a signed /streams/<token>) the bytes are the gem's: its preamble
# (retry: 2000, then the open comment, as two blocks; no pgbus:connected
# unless ?connected=1), one data line per event with every CR and LF of the
# payload removed, so that the gem's element (fetch parser: each data line
# trimmed, lines joined with nothing) renders a multi-line partial as the
# gem's own streamer makes it render; nothing a payload holds ends a frame or
# adds a field. This server's own routes keep their framing (split lines,
# pgbus:connected). Names: mixed-case GlobalIDs, names with : / - ., a
# subscription before the queue exists, and a name whose queue name would
# pass 47 characters (400 with the reason, at once). A JWT beside the signed
# name (cookie, Bearer, ?token=) brings sub and ctx, never another stream.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode;
use GemApp qw(gem_queue gem_create gem_send gem_send_sql signed jwt element_view);

my $KEY = 'gem-bytes-signing-secret';
my $JWT = 'gem-bytes-jwt-secret';
my $pg = PgbusNode->new(
	'gembytes',
	extension => 0,
	heartbeat => 15,
	conf => "pgbus_stream.signing_secret = '$KEY'\n"
	  . "pgbus_stream.jwt_secret = '$JWT'\n"
	  . "pgbus_stream.token_cookie = 'pgbus_token'\n");
$pg->safe_psql('postgres', slurp_file("$FindBin::Bin/../lib/pgmq_fixture.sql"));
$pg->safe_psql('postgres', 'CREATE EXTENSION pgbus_stream');

my $PARTIAL = "<turbo-stream action=\"append\" target=\"messages\">\n  <template>\n    <li>\n      Hello\r\n      world\r    </li>\n  </template>\n</turbo-stream>\n";
(my $GEM_DATA = $PARTIAL) =~ s/[\r\n]//g;

sub gem_path { return "/pgbus/streams/" . signed($_[0], $KEY) }

# ---- the bytes of the gem's route ------------------------------------------
my $name = 'gid://app/Room/7:messages';
my $queue = gem_create($pg, $name);
is($queue, 'pgbus_gid_appRoom7_messages', 'the gem\'s queue name');
my $stream = $pg->safe_psql('postgres', "SELECT name FROM pgbus_stream.streams WHERE queue_name = lower('$queue')");
my $c = $pg->sse(gem_path($name) . '?since=0');
is($c->status, 200, 'gem route: 200');
my $id = gem_send($pg, $name, $PARTIAL);
ok($c->wait_for_events(1, 10), 'the partial arrives');
$c->poll(0.3);
my $body = $c->body;
my $preamble = "retry: 2000\n\n: pgbus stream open since_id=0 stream=$stream\n\n";
is(substr($body, 0, length $preamble), $preamble, 'preamble: the gem\'s two blocks, no pgbus:connected');
my $rest = substr($body, length $preamble);
like($rest, qr/\Aid: [^\n]+\nevent: turbo-stream\ndata: \Q$GEM_DATA\E\n\n\z/,
	'the frame: one data line, every CR and LF removed, exactly as the gem sends it');
is($c->event_count, 1, 'one event as the gem\'s client counts them');
is_deeply([ element_view($body) ], [$GEM_DATA], 'the gem\'s element renders what the gem makes it render');
my ($li) = $GEM_DATA =~ m{<li>(.*?)</li>};
is($li, '      Hello      world    ', 'a multi-line partial keeps the spaces between its words');
my $last = ($c->events)[-1]{id};
$c->close;

# The same stream through a signed /streams/<token>, reconnecting with the id.
gem_send($pg, $name, "second\nline");
$c = $pg->sse('/streams/' . signed($name, $KEY), headers => { 'Last-Event-ID' => $last });
ok($c->wait_for_events(1, 10), 'signed /streams/<token>: the next one');
$c->poll(0.3);
like($c->body, qr/\Aretry: 2000\n\n: pgbus stream open since_id=\Q$last\E stream=\Q$stream\E\n\nid: [^\n]+\nevent: turbo-stream\ndata: secondline\n\n\z/,
	'signed /streams/<token>: the gem\'s bytes too');
$c->close;

# ?connected=1 asks for the connection id (what broadcast(exclude => ...) needs).
$c = $pg->sse(gem_path($name) . '?since=0&connected=1');
ok($c->wait_for_events(3, 10), '?connected=1: connected event and the two messages');
my @ev = $c->events;
is($ev[0]{event}, 'pgbus:connected', '?connected=1: pgbus:connected first');
like($ev[0]{data}, qr/^\{"connectionId":"[0-9a-f]{16}"\}$/, '?connected=1: its connection id');
is($ev[1]{data}, $GEM_DATA, '?connected=1: the gem\'s framing still');
$c->close;
$c = $pg->sse(gem_path($name) . '?connected=yes');
is($c->status, 400, '?connected=yes: 400');
$c->close;

# Nothing a payload holds ends a frame or adds a field.
my $evil = "a\n\nid: 999\r\n\r\nevent: pgbus:shutdown\rdata: {}\n\n: comment\nretry: 1\n";
$c = $pg->sse(gem_path($name) . "?since=$id");
ok($c->wait_for_events(1, 10), 'framing: the queued message');
my $n0 = $c->event_count;
gem_send($pg, $name, $evil);
ok($c->wait_for_events($n0 + 1, 10), 'framing: the hostile payload arrives');
$c->poll(0.5);
my @all = $c->events;
is(scalar @all, $n0 + 1, 'framing: as one event');
(my $flat = $evil) =~ s/[\r\n]//g;
is($all[-1]{data}, $flat, 'framing: its data is the payload without CR/LF');
is($all[-1]{event}, 'turbo-stream', 'framing: no event field injected');
# (the id the server gives can hold the digits 999 by chance: compared whole)
isnt($all[-1]{id}, '999', 'framing: no id injected');
ok(!defined $c->retry || $c->retry == 2000, 'framing: no retry injected');
$c->close;

# This server's own route keeps split lines and pgbus:connected.
$c = $pg->sse("/streams/$stream?since=0", headers => { Authorization => 'Bearer ' . jwt($JWT) });
ok($c->wait_for_events(2, 10), 'own route: events');
is(($c->events)[0]{event}, 'pgbus:connected', 'own route: pgbus:connected');
is(($c->events)[1]{data}, join("\n", split(/\r\n|\r|\n/, $PARTIAL, -1)), 'own route: the payload\'s lines, one data line each');
$c->close;

# ---- names ----------------------------------------------------------------------
# Mixed-case GlobalID (live delivery: the gem never has it), : / - . names.
for my $n ('Z2lkOi8vYXBwL1VzZXIvMQ', 'Z2lkOi8vYXBwL1VzZXIvMQ:messages', 'chat-room.7/x:y')
{
	gem_create($pg, $n);
	my $w = $pg->safe_psql('postgres', 'SELECT coalesce(max(msg_id), 0) FROM pgmq.q_' . lc gem_queue($n));
	my $s = $pg->sse(gem_path($n) . "?since=$w");
	is($s->status, 200, "name $n: 200");
	gem_send($pg, $n, "to $n");
	ok($s->wait_for_events(1, 10), "name $n: live delivery");
	is(($s->events)[0]{data}, "to $n", "name $n: its message");
	$s->close;
}

# Subscribing before the queue exists (the gem creates it at the first broadcast).
{
	my $n = 'gid://app/Order/42:messages';
	my $s = $pg->sse(gem_path($n) . '?since=0');
	is($s->status, 200, 'before the queue exists: 200');
	ok(defined $s->wait_for_comment(qr/^pgbus stream open since_id=0 stream=(?i:gid_appOrder42_messages)$/, 10),
		'before the queue exists: the open comment');
	is($s->event_count, 0, 'before the queue exists: no event');
	gem_create($pg, $n);
	gem_send($pg, $n, "born\nhere");
	ok($s->wait_for_events(1, 15), 'before the queue exists: the first message once it is born');
	is(($s->events)[0]{data}, 'bornhere', 'before the queue exists: in the gem\'s framing');
	$s->close;
}

# A name whose queue name would pass 47 characters: refused at once.
{
	my $long = 'gid://app/VeryLongModelName/123456789:notifications_feed';
	ok(length(gem_queue($long)) > 47, 'the long name\'s queue name has ' . length(gem_queue($long)) . ' characters');
	my $t0 = time;
	my $s = $pg->sse(gem_path($long) . '?since=0', timeout => 10);
	is($s->status, 400, 'too long: 400');
	$s->wait_closed(5);
	like($s->body, qr/too long.*47/, 'too long: the reason in the body');
	ok(time - $t0 < 5, 'too long: at once');
	$s->close;
	my $ok47 = 'x' x 41;
	is(length(gem_queue($ok47)), 47, '47 characters exactly');
	$s = $pg->sse(gem_path($ok47) . '?since=0');
	is($s->status, 200, '47 characters: 200 (waits for its queue)');
	$s->close;
}

# ---- a JWT beside the signed name -------------------------------------------
{
	$pg->safe_psql('postgres', q{SELECT pgbus_stream.define_audience('admin_only', '$.role ? (@ == "admin")')});
	my $n = 'room:audience';
	gem_create($pg, $n);
	my $admin = jwt($JWT, streams => ['nothing_here'], sub => 'alice', ctx => '{"role":"admin"}');
	my $viewer = jwt($JWT, sub => 'bob', ctx => '{"role":"viewer"}');
	my %how = (
		'cookie' => [ '', { Cookie => "other=1; pgbus_token=$admin" } ],
		'?token=' => [ "&token=$admin", {} ],
		'Bearer' => [ '', { Authorization => "Bearer $admin" } ],
		'a viewer' => [ '', { Authorization => "Bearer $viewer" } ],
		'no JWT' => [ '', {} ],
		'a bad JWT' => [ '', { Authorization => 'Bearer x.y.z' } ],);
	my %conn;
	for my $k (keys %how)
	{
		$conn{$k} = $pg->sse(gem_path($n) . "?since=0$how{$k}[0]", headers => $how{$k}[1]);
		is($conn{$k}->status, 200, "JWT beside the name ($k): 200");
	}
	gem_send($pg, $n, 'public');
	gem_send($pg, $n, 'secret', 'admin_only');
	for my $k (keys %how)
	{
		my $admin_like = $k =~ /^(cookie|\?token=|Bearer)$/;
		$conn{$k}->wait_for_events($admin_like ? 2 : 1, 10);
	}
	$conn{'no JWT'}->poll(1);
	for my $k (sort keys %how)
	{
		my $admin_like = $k =~ /^(cookie|\?token=|Bearer)$/;
		is_deeply([ map { $_->{data} } $conn{$k}->events ], $admin_like ? [qw(public secret)] : ['public'],
			"JWT beside the name ($k): " . ($admin_like ? '[public, secret]' : '[public]'));
	}
	my %subs = map { split /\|/ } split /\n/, $pg->safe_psql('postgres',
		q{SELECT coalesce(sub, '-') || '|' || connections FROM pgbus_stream.presence('} . $pg->safe_psql('postgres',
			"SELECT name FROM pgbus_stream.streams WHERE queue_name = lower('" . gem_queue($n) . "')") . q{')});
	is($subs{alice}, 3, 'the JWT\'s sub names the connection (presence)');
	is($subs{bob}, 1, 'the viewer\'s too');
	$_->close for values %conn;
	# The signed name decides the stream: a JWT does not open another one.
	my $other = $pg->sse("/pgbus/streams/" . signed('room:other', 'wrong key') . "?token=" . jwt($JWT));
	is($other->status, 401, 'a JWT does not stand in for a bad signed name');
	$other->close;
}

$pg->finish;
done_testing();
