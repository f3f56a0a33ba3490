# 090_version: the version has one source, pgbus_stream.control's
# default_version, and every file that names it agrees: the install script's
# name, META.json (PGXN meta-spec 1.0.0: required keys, provides), the Debian
# changelog and control file; every older install script has a chain of
# upgrade scripts to it, and frozen install scripts stay byte for byte as
# released. No server needed.
use strict;
use warnings;

use FindBin;
use Digest::SHA qw(sha256_hex);
use JSON::PP;
use Test::More;

my $root = "$FindBin::Bin/../..";
my $ext = 'pgbus_stream';

# Install scripts of released versions never change: a database made with
# them must keep upgrading to the same end state.
my %frozen = (
	'0.1.0' => 'be6f01202b3e1483132db7667790759a842767c1ae2673f03581817678bfb948',
	'0.2.0' => 'dd48107fa01edb307385131e5c844bd5f06ca6a7ec22f839636914874b8f64f9',
);

sub slurp
{
	my ($file) = @_;
	open(my $fh, '<', "$root/$file") or die "cannot read $file: $!";
	local $/;
	my $text = <$fh>;
	close $fh;
	return $text;
}

sub vcmp
{
	my @a = split /\./, $_[0];
	my @b = split /\./, $_[1];
	for my $i (0 .. 2)
	{
		my $c = ($a[$i] // 0) <=> ($b[$i] // 0);
		return $c if $c;
	}
	return 0;
}

# ---- control file: the one place ----
my $control = slurp("$ext.control");
my ($version) = $control =~ /^default_version\s*=\s*'([^']*)'/m;
ok(defined $version, 'control: default_version is set');
like($version, qr/^\d+\.\d+\.\d+$/, "control: default_version $version is major.minor.patch (SemVer, as PGXN wants)");
like($control, qr/^module_pathname\s*=\s*'\$libdir\/$ext'/m, 'control: module_pathname is $libdir/' . $ext);

# ---- SQL scripts ----
opendir(my $dh, "$root/sql") or die "sql/: $!";
my @scripts = grep { /^\Q$ext\E--.*\.sql$/ } readdir $dh;
closedir $dh;
my (%install, %edges);
for my $f (@scripts)
{
	if ($f =~ /^\Q$ext\E--(\d+\.\d+\.\d+)\.sql$/) { $install{$1} = 1 }
	elsif ($f =~ /^\Q$ext\E--(\d+\.\d+\.\d+)--(\d+\.\d+\.\d+)\.sql$/) { push @{ $edges{$1} }, $2 }
	else { fail("sql/$f: neither <version>.sql nor <from>--<to>.sql") }
}
ok($install{$version}, "sql/$ext--$version.sql (the install script of default_version) exists");
for my $v (sort { vcmp($a, $b) } keys %install)
{
	cmp_ok(vcmp($v, $version), '<=', 0, "install script $v is not newer than default_version $version");
	next if $v eq $version;
	ok(exists $frozen{$v}, "install script $v is a released, frozen version (listed in this test)");
	# Breadth-first over the upgrade scripts: ALTER EXTENSION ... UPDATE
	# from a database made with $v must reach default_version.
	my %seen = ($v => 1);
	my @queue = ($v);
	while (my $from = shift @queue)
	{
		for my $to (@{ $edges{$from} // [] })
		{
			push @queue, $to unless $seen{$to}++;
		}
	}
	ok($seen{$version}, "upgrade scripts lead from $v to $version");
}
for my $from (sort keys %edges)
{
	for my $to (@{ $edges{$from} })
	{
		cmp_ok(vcmp($from, $to), '<', 0, "upgrade script $from--$to goes forward");
		cmp_ok(vcmp($to, $version), '<=', 0, "upgrade script $from--$to ends at or before $version");
	}
}
for my $v (sort keys %frozen)
{
	is(sha256_hex(slurp("sql/$ext--$v.sql")), $frozen{$v}, "sql/$ext--$v.sql is unchanged since its release");
}

# ---- META.json ----
my $meta = eval { JSON::PP->new->decode(slurp('META.json')) };
ok($meta, 'META.json parses as JSON') or diag($@);
$meta //= {};
is($meta->{'meta-spec'}{version}, '1.0.0', 'META.json: meta-spec 1.0.0');
for my $key (qw(name version abstract maintainer license provides meta-spec))
{
	ok(defined $meta->{$key} && $meta->{$key} ne '', "META.json: required key '$key'");
}
for my $key (keys %$meta)
{
	like($key,
		qr/^(?:name|version|abstract|maintainer|license|provides|meta-spec|description|generated_by|tags|no_index|prereqs|release_status|resources|[xX]_.+)$/,
		"META.json: '$key' is a key of the spec or a custom x_ key");
}
is($meta->{name}, $ext, 'META.json: name');
is($meta->{version}, $version, 'META.json: version is default_version');
is_deeply([ sort keys %{ $meta->{provides} // {} } ], [$ext], "META.json: provides the extension $ext");
my $provides = $meta->{provides}{$ext} // {};
is($provides->{version}, $version, 'META.json: provides version is default_version');
is($provides->{file}, "sql/$ext--$version.sql", 'META.json: provides file is the install script of default_version');
ok(-f "$root/$provides->{file}", "META.json: $provides->{file} exists") if defined $provides->{file};
ok(!defined $provides->{docfile} || -f "$root/$provides->{docfile}", 'META.json: docfile exists');
is($meta->{license}, 'postgresql', 'META.json: license postgresql');
like(slurp('LICENSE'), qr/\APostgreSQL License\n/, 'LICENSE is the PostgreSQL License');
like($meta->{release_status} // 'stable', qr/^(?:stable|testing|unstable)$/, 'META.json: release_status');
like($meta->{prereqs}{runtime}{requires}{PostgreSQL} // '', qr/15\.0\.0/, 'META.json: requires PostgreSQL 15');

# ---- Debian package ----
my ($deb_version) = slurp('debian/changelog') =~ /\A\S+ \(([^)]+)\)/;
is($deb_version, $version, 'debian/changelog: newest entry is default_version');
my $deb_control = slurp('debian/control');
like($deb_control, qr/^Package: postgresql-15-pgbus-stream$/m, 'debian/control: package postgresql-15-pgbus-stream');
(my $from_template = slurp('debian/control.in')) =~ s/PGVERSION/15/g;
is($deb_control, $from_template, 'debian/control is debian/control.in for PostgreSQL 15 (pg_buildext updatecontrol)');

done_testing();
