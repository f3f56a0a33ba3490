# GemApp: what a Rails app on the pgbus gem (0.7.x) does, for the TAP tests
# of its drop-in (080-082): its queue for a stream name, made the gem's way
# (pgmq.create, its ALTER TABLEs, PGMQ's NOTIFY trigger, the archive index),
# its broadcasts (pgmq.send of its envelope), its signed stream names
# (MessageVerifier: Base64 of the JSON name, "--", hex HMAC-SHA256), and how
# its two clients read a stream:
#  - the gem's own test client counts every block that has an id, event or
#    data field as an event (SSEClient's events());
#  - the gem's element reads its first connection with fetch: the body split
#    on "\n\n", blocks starting with ":" skipped, each data line trimmed and
#    the lines joined with nothing between them (element_view()).
package GemApp;

use strict;
use warnings;

use Digest::SHA qw(hmac_sha256 hmac_sha256_hex);
use Exporter 'import';
use MIME::Base64 qw(encode_base64 encode_base64url);
use Time::HiRes qw(time);

use PgbusNode qw(sql_literal);

our @EXPORT_OK = qw(gem_queue gem_create gem_send gem_send_sql signed jwt element_view);

# normalize("pgbus_" + name) as the gem does: kept when it is all
# [A-Za-z0-9_], else -.: become _, anything else outside [A-Za-z0-9_] is
# dropped, runs of _ collapse, the ends are trimmed. The case is kept.
sub gem_queue
{
	my ($name) = @_;
	my $q = "pgbus_$name";
	return $q if $q =~ /\A\w+\z/a;
	$q =~ s/[-.:]/_/g;
	$q =~ s/[^A-Za-z0-9_]//g;
	$q =~ s/_+/_/g;
	$q =~ s/^_+|_+$//g;
	return $q;
}

# The gem's first broadcast to a stream: its queue and what it does to it.
sub gem_create
{
	my ($pg, $name) = @_;
	my $q = gem_queue($name);
	my $t = lc $q;
	$pg->safe_psql(
		'postgres', qq{
SELECT pgmq.create('$q');
ALTER TABLE pgmq."q_$t" SET (autovacuum_vacuum_scale_factor = 0.05,
  autovacuum_vacuum_cost_delay = 0, fillfactor = 70);
ALTER TABLE pgmq."a_$t" SET (autovacuum_vacuum_scale_factor = 0.1);
SELECT pgmq.enable_notify_insert('$q', 0);
CREATE INDEX IF NOT EXISTS "a_${t}_msg_id_idx" ON pgmq."a_$t" (msg_id);
});
	return $q;
}

sub gem_send_sql
{
	my ($name, $html, $visible_to) = @_;
	my $env = "jsonb_build_object('html', " . sql_literal($html)
	  . (defined $visible_to ? ", 'visible_to', " . sql_literal($visible_to) : '') . ')';
	return "SELECT pgmq.send('" . gem_queue($name) . "', $env)";
}

sub gem_send { my ($pg, @rest) = @_; return $pg->safe_psql('postgres', gem_send_sql(@rest)) }

sub signed
{
	my ($name, $key) = @_;
	(my $json = $name) =~ s/(["\\])/\\$1/g;
	my $data = encode_base64(qq{"$json"}, '');
	return "$data--" . hmac_sha256_hex($data, $key);
}

sub jwt
{
	my ($secret, %claims) = @_;
	my $streams = $claims{streams} // ['*'];
	my $payload = '{"streams":[' . join(',', map { qq{"$_"} } @$streams) . '],"exp":'
	  . (int(time) + 3600)
	  . (defined $claims{sub} ? qq{,"sub":"$claims{sub}"} : '')
	  . (defined $claims{ctx} ? qq{,"ctx":$claims{ctx}} : '') . '}';
	my $input = encode_base64url('{"alg":"HS256","typ":"JWT"}') . '.' . encode_base64url($payload);
	return "$input." . encode_base64url(hmac_sha256($input, $secret));
}

# What the gem's element renders from a body read by its fetch parser: the
# data of each event, as a list.
sub element_view
{
	my ($body) = @_;
	my @out;
	for my $block (split /\n\n/, $body)
	{
		next if $block eq '' || substr($block, 0, 1) eq ':';
		my @data = map { my $v = substr($_, 5); $v =~ s/^\s+|\s+$//g; $v }
		  grep { /^data:/ } split /\n/, $block;
		push @out, join('', @data) if @data;
	}
	return @out;
}

1;
