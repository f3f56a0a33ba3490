# 040_auth: private streams and their credentials on a real server: pgbus /
# turbo-rails signed stream names (tokens made by the real
# ActiveSupport::MessageVerifier, test/unit/fixtures, and by an HMAC computed
# here), HS256 JWTs from Authorization: Bearer, ?token= and a cookie (minted
# with sign_token() and by hand), durable subscribers bound to the token's
# sub, secrets kept out of SQL, logs and the operators' routes.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use Digest::SHA qw(hmac_sha256 hmac_sha256_hex);
use MIME::Base64 qw(encode_base64 encode_base64url);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode;

my $RAW = 'a' x 64;
my $SKB = '3f1c' x 32;    # the fixtures' secret_key_base
my $JWT = 'jwt-secret-for-e2e';
my $pg = PgbusNode->new(
	'auth', conf => qq{
pgbus_stream.signing_secret = '$RAW'
pgbus_stream.secret_key_base = '$SKB'
pgbus_stream.jwt_secret = '$JWT'
pgbus_stream.token_cookie = 'pgbus_token'
});
$pg->create_stream('chat', public => 0);
$pg->create_stream('other', public => 0);
$pg->create_stream('room_1', public => 0);
$pg->create_stream('qq', public => 0);
$pg->create_stream('ai_chat_3a4f9c21b7d20e18_messages', public => 0);
$pg->create_stream('open');

# open_with connects and returns (status, client); on 200 it waits for the
# pgbus:connected frame.
sub open_with
{
	my ($path, %opt) = @_;
	my $c = $pg->sse($path, %opt);
	$c->wait_for_events(1, 10) if $c->status == 200;
	return $c;
}

sub status_of
{
	my $c = open_with(@_);
	my $st = $c->status;
	$c->close;
	return $st;
}

# gets: the client receives exactly this broadcast next.
sub gets
{
	my ($c, $stream, $text, $what) = @_;
	my $before = scalar $c->data_events;
	$pg->broadcast($stream, $text);
	$c->wait_for_data_events($before + 1, 10);
	my @d = map { $_->{data} } $c->data_events;
	is($d[-1] // '', $text, $what);
}

# sign is a MessageVerifier token computed here (an HMAC apart from the server's).
sub sign
{
	my ($json, $key) = @_;
	my $data = encode_base64($json, '');
	return "$data--" . hmac_sha256_hex($data, $key);
}

sub jwt
{
	my ($header, $claims, $key) = @_;
	my $input = encode_base64url($header) . '.' . encode_base64url($claims);
	return "$input." . encode_base64url(hmac_sha256($input, $key // $JWT));
}

# ---- private by default: no hint whether a stream exists ------------------
{
	my $c = open_with('/streams/chat');
	is($c->status, 401, 'private stream without a credential: 401');
	is($c->header('www-authenticate'), 'Bearer', '401 names the Bearer scheme');
	my $private_body = $c->body;
	$c->close;
	$c = open_with('/streams/no_such_stream');
	is($c->status, 401, 'unknown stream without a credential: 401 too');
	is($c->body, $private_body, 'same answer for an unknown and a private stream');
	$c->close;
	is(status_of('/streams/open'), 200, 'public stream: no credential needed');
	is($pg->safe_psql('postgres', q{SELECT public FROM pgbus_stream.create_stream('dflt')}),
		'f', 'create_stream makes private streams by default');
}

# ---- signed stream names ---------------------------------------------------
my %fixture;    # "kind name note" -> token, from the real MessageVerifier
{
	open my $fh, '<', "$FindBin::Bin/../unit/fixtures/signed_names.tsv" or die $!;
	while (<$fh>)
	{
		chomp;
		my @f = split /\t/;
		next unless @f == 7 && $f[0] =~ /^(ok|fail)$/;
		$fixture{"$f[1]|$f[4]|$f[6]"} = $f[5];
	}
}
{
	my $doc = 'ImNoYXQi--e1051e5eb43d9af0f34d463563153fd301e2faa38160efe648ece0d226fde283';
	my $c = open_with("/pgbus/streams/$doc");
	is($c->status, 200, 'the gem\'s documented signed name opens chat');
	like($c->body, qr/ stream=chat\n/, '... the stream it names');
	gets($c, 'chat', 'signed hello', '... and delivers its broadcasts');
	$c->close;
	is(status_of("/streams/$doc"), 200, 'the same token under /streams/');

	my $skb = $fixture{'skb|chat|6.1 plain'};
	ok($skb, 'fixture: turbo-rails token made from secret_key_base');
	is(status_of("/pgbus/streams/$skb"), 200, 'turbo-rails signed name (secret_key_base, Rails >= 7 key)');
	my $skb1 = $fixture{'skb1|chat|6.1 plain'};
	is(status_of("/pgbus/streams/$skb1"), 200, 'turbo-rails signed name (Rails 6.1 key)');
	my $env = $fixture{'raw|chat|6.1 envelope, exp in the future'};
	is(status_of("/pgbus/streams/$env"), 200, 'Rails 6.1 metadata envelope');
	is(status_of('/pgbus/streams/' . $fixture{'raw|chat|7.1-by-hand envelope'}),
		200, 'Rails 7.1 metadata envelope');
	is(status_of('/pgbus/streams/' . $fixture{'raw|chat|6.1 envelope, expired'}),
		401, 'expired envelope: 401');
	is(status_of('/pgbus/streams/' . $fixture{'raw|chat|6.1 envelope, purpose set'}),
		401, 'envelope with a purpose: 401');
	is(status_of('/pgbus/streams/' . $fixture{'raw|ai_chat_3a4f9c21b7d20e18:messages|6.1 plain'}),
		200, 'a record stream name opens its gem queue\'s stream');

	(my $tampered = $doc) =~ s/^I/J/;
	is(status_of("/pgbus/streams/$tampered"), 401, 'tampered signed name: 401');
	is(status_of('/pgbus/streams/' . sign('"chat"', 'b' x 64)), 401, 'signed with another key: 401');
	is(status_of('/pgbus/streams/' . sign('"other"', $RAW) . '?x=1'), 200,
		'a signed name opens only the stream it names (other)');

	# A token whose Base64 has '+', '/' and '=', unescaped and percent-encoded.
	my $tok;
	for my $k (1 .. 200)
	{
		my $t = sign('"qq' . ('?' x ($k % 7)) . ('>' x ($k % 5)) . ('~' x ($k % 3)) . '"', $RAW);
		if ($t =~ m{\+} && $t =~ m{/} && $t =~ /=/) { $tok = $t; last }
	}
	ok($tok, "a token with + / = ($tok)");
	is(status_of("/pgbus/streams/$tok"), 200, 'unescaped + / = in the path');
	(my $enc = $tok) =~ s{([+/=])}{sprintf('%%%02X', ord $1)}ge;
	is(status_of("/pgbus/streams/$enc"), 200, 'percent-encoded + / =');
}

# ---- JWT ---------------------------------------------------------------------
my $tok_chat = $pg->safe_psql('postgres',
	q{SELECT pgbus_stream.sign_token(ARRAY['chat', 'room_*'], '1 hour', 'alice', '{"role":"admin"}')});
like($tok_chat, qr/^[\w-]+\.[\w-]+\.[\w-]+$/, 'sign_token mints a compact JWT');
{
	my $c = open_with('/streams/chat', headers => { Authorization => "Bearer $tok_chat" });
	is($c->status, 200, 'JWT in Authorization: Bearer');
	gets($c, 'chat', 'jwt hello', '... delivers');
	$c->close;
	is(status_of("/streams/chat?token=$tok_chat"), 200, 'JWT in ?token=');
	is(status_of('/streams/chat', headers => { Cookie => "a=b; pgbus_token=$tok_chat" }), 200,
		'JWT in the pgbus_token cookie');
	is(status_of('/streams/room_1', headers => { Authorization => "Bearer $tok_chat" }), 200,
		'pattern room_* covers room_1');
	is(status_of('/streams/other', headers => { Authorization => "Bearer $tok_chat" }), 403,
		'a stream the token does not cover: 403');
	is(status_of('/streams/nope_x', headers => { Authorization => "Bearer $tok_chat" }), 403,
		'an unknown stream the token does not cover: 403 as well');
	is(status_of('/streams/room_9', headers => { Authorization => "Bearer $tok_chat" }), 200,
		'an unknown stream the token covers: 200, the subscription waits for it (064_gem_pending)');
	is(status_of("/streams?stream=chat&stream=other&token=$tok_chat"), 403,
		'several streams: every one must be covered');

	my ($h, $b, $s) = split /\./, $tok_chat;
	is(status_of('/streams/chat', headers => { Authorization => "Bearer $h.$b." . ($s =~ tr/A-Za-z/B-ZAb-za/r) }),
		401, 'bad signature: 401');
	my $now = time;
	my $claims = sprintf('{"streams":["chat"],"exp":%d}', $now + 600);
	is(status_of('/streams/chat', headers => { Authorization => 'Bearer ' . jwt('{"alg":"HS256"}', $claims) }),
		200, 'a JWT made by hand verifies');
	is(status_of('/streams/chat', headers => { Authorization => 'Bearer ' . jwt('{"alg":"HS256"}', $claims, 'other') }),
		401, 'made with another key: 401');
	my $none = encode_base64url('{"alg":"none"}') . '.' . encode_base64url($claims) . '.';
	is(status_of('/streams/chat', headers => { Authorization => "Bearer $none" }), 401, 'alg none: 401');
	is(status_of('/streams/chat', headers => { Authorization => 'Bearer ' . jwt('{"alg":"HS512"}', $claims) }),
		401, 'alg HS512: 401');
	my $expired = jwt('{"alg":"HS256"}', sprintf('{"streams":["chat"],"exp":%d}', $now - 120));
	is(status_of('/streams/chat', headers => { Authorization => "Bearer $expired" }), 401, 'expired: 401');
	my $early = jwt('{"alg":"HS256"}', sprintf('{"streams":["chat"],"exp":%d,"nbf":%d}', $now + 900, $now + 600));
	is(status_of('/streams/chat', headers => { Authorization => "Bearer $early" }), 401, 'not valid yet: 401');
	is(status_of('/streams/open', headers => { Authorization => "Bearer $expired" }), 200,
		'a public stream ignores a bad token');
	is(status_of('/streams/open', headers => { Cookie => "pgbus_token=$expired" }), 200,
		'... and an expired cookie (sent unasked)');
	my $e = open_with('/streams/chat', headers => { Authorization => "Bearer $expired" });
	like($e->body, qr/token: expired/, 'a private stream refuses it saying why');
	$e->close;
	my $k = open_with('/streams/chat', headers => { Cookie => "pgbus_token=$expired" });
	is($k->status, 401, 'an expired cookie on a private stream: 401');
	like($k->body, qr/token cookie: token: expired/, '... saying why');
	$k->close;
	is(status_of('/streams/chat', headers => { Authorization => 'Bearer ' . ('x' x 9000) }), 401,
		'oversized token: 401');
}

# ---- durable subscribers bound to the token's sub ----------------------------
{
	is(status_of("/streams/chat?subscriber=alice&token=$tok_chat"), 200, 'subscriber = sub: 200');
	is(status_of("/streams/chat?subscriber=bob&token=$tok_chat"), 403, 'another subscriber: 403');
	is(status_of('/streams/chat?subscriber=alice'), 401, 'subscriber on a private stream without a credential: 401');
	my $nosub = $pg->safe_psql('postgres', q{SELECT pgbus_stream.sign_token(ARRAY['chat'], '1 hour')});
	is(status_of("/streams/chat?subscriber=alice&token=$nosub"), 403, 'a token without sub cannot resume alice');
	is(status_of("/streams/chat?subscriber=a%20b&token=$tok_chat"), 400, 'invalid subscriber id: 400');
	is(status_of('/streams/open?subscriber=' . ('x' x 129)), 400, 'subscriber id too long: 400');
	is(status_of('/streams/open?subscriber=carol'), 403,
		'public stream: a stored cursor needs a credential naming it too (043_subscriber_cursor)');
}

# ---- secrets -------------------------------------------------------------------
{
	$pg->safe_psql('postgres', q{CREATE ROLE plain LOGIN});
	for my $guc (qw(signing_secret secret_key_base jwt_secret token_cookie admin_token))
	{
		my ($rc, $out, $err) = $pg->psql('postgres', "SHOW pgbus_stream.$guc", extra_params => [ '-U', 'plain' ]);
		like($err, qr/permission denied|must be superuser|privileges/i, "$guc: not readable by a plain role");
	}
	is($pg->safe_psql('postgres', q{SELECT count(*) FROM pg_settings WHERE name IN
		('pgbus_stream.signing_secret', 'pgbus_stream.secret_key_base', 'pgbus_stream.jwt_secret')},
		extra_params => [ '-U', 'plain' ]), '0', 'secrets are hidden from pg_settings');
	my ($rc, $out, $err) = $pg->psql('postgres', q{SELECT pgbus_stream.sign_token(ARRAY['*'], '1 hour')},
		extra_params => [ '-U', 'plain' ]);
	like($err, qr/permission denied/, 'sign_token is not executable by PUBLIC');

	# A changed secret applies at reload and never reaches the log: the
	# server logs a reloaded setting's new value, so the secret comes from a
	# file (file:<path>) and the log shows only the path.
	my $new = 'rotated-jwt-secret-' . int(rand(1e9));
	my $keyfile = $pg->data_dir . '/jwt.key';
	PostgreSQL::Test::Utils::append_to_file($keyfile, "$new\n");
	$pg->safe_psql('postgres', qq{ALTER SYSTEM SET pgbus_stream.jwt_secret = 'file:$keyfile'; SELECT pg_reload_conf()});
	my $fresh = jwt('{"alg":"HS256"}', sprintf('{"streams":["chat"],"exp":%d}', time + 600), $new);
	my $deadline = time + 10;
	sleep 0.2 while status_of('/streams/chat', headers => { Authorization => "Bearer $fresh" }) != 200
	  && time < $deadline;
	is(status_of('/streams/chat', headers => { Authorization => "Bearer $fresh" }), 200, 'rotated jwt_secret applies');
	is(status_of('/streams/chat', headers => { Authorization => "Bearer $tok_chat" }), 401, 'old tokens stop working');

	my $metrics = $pg->sse('/metrics');
	$metrics->wait_closed(5);
	my $stats = $pg->sse('/stats.json');
	$stats->wait_closed(5);
	my $logs = slurp_file($pg->logfile);
	for my $secret ($RAW, $SKB, $JWT, $new)
	{
		unlike($logs . $metrics->body . $stats->body, qr/\Q$secret\E/, 'no secret in the log, /metrics or /stats.json');
	}
	unlike($metrics->body, qr/stream="chat"/, '/metrics does not name private streams to anonymous clients');
	like($metrics->body, qr/stream="open"/, '... but names public ones');
	unlike($stats->body, qr/"chat"/, '/stats.json neither');
	$metrics->close;
	$stats->close;
	my $diag = $pg->safe_psql('postgres', q{SELECT string_agg(detail, ' ') FROM pgbus_stream.diagnostics()});
	for my $secret ($RAW, $SKB, $JWT, $new)
	{
		unlike($diag, qr/\Q$secret\E/, 'no secret in diagnostics()');
	}
	unlike($diag, qr/\Q$tok_chat\E/, 'no token in diagnostics()');
	like($pg->safe_psql('postgres', q{SELECT pgbus_stream.sign_token(ARRAY['chat'], '1 minute')}),
		qr/\./, 'sign_token reads the secret file too');
}

$pg->finish;
done_testing();
