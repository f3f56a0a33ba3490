# pgbus_stream — PGXS build. The version comes from pgbus_stream.control only.
EXTENSION   = pgbus_stream
EXTVERSION  = $(shell sed -n "s/^default_version *= *'\(.*\)'/\1/p" $(EXTENSION).control)
MODULE_big  = pgbus_stream
# The current install script, the frozen scripts of earlier versions and the
# upgrade scripts between them.
DATA        = $(wildcard sql/$(EXTENSION)--*.sql)

SRCS = src/pgbus_stream.cpp \
       $(wildcard src/settings/*.cpp src/shmem/*.cpp src/capture/*.cpp src/worker/*.cpp src/sql/*.cpp src/pg/*.cpp) \
       $(wildcard src/core/*.cpp src/http/*.cpp src/engine/*.cpp)
OBJS = $(SRCS:.cpp=.o)

# make installcheck: the regression suite against a running server that
# preloads pgbus_stream (PGHOST, PGPORT, PGUSER select it), as for any PGXS
# extension. make installcheck-temp: the same on a temporary instance of the
# installed PostgreSQL started with test/regress.conf (test/run_all.sh).
REGRESS      = $(patsubst sql/%.sql,%,$(filter-out sql/$(EXTENSION)--%,$(wildcard sql/*.sql)))
TEMP_INSTANCE_OPTS = --temp-config=$(srcdir)/test/regress.conf --temp-instance=$(CURDIR)/tmp_check_regress

PG_CONFIG ?= pg_config
PG_CPPFLAGS = -Isrc $(shell pkg-config --cflags libmicrohttpd)
PG_CXXFLAGS = -std=c++17 -Wall -Wextra -Wno-register -Wno-unused-parameter -Wno-missing-field-initializers $(WERROR)
SHLIB_LINK  = $(shell pkg-config --libs libmicrohttpd) -lcrypto -lstdc++
EXTRA_CLEAN = tmp_check_regress results regression.diffs regression.out

# Track header dependencies (.deps/); no LLVM bitcode for C++ sources; no
# RUNPATH (libmicrohttpd is found on the system's library path, as packages
# must).
override autodepend = yes
override with_llvm = no
override enable_rpath = no

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# C++ flags: PGXS's CXXFLAGS carry C-only warnings; keep ours.
override CXXFLAGS := -O2 -g -fPIC $(PG_CXXFLAGS)

# PGXS names a dependency file after the source's base name alone, and
# sources in different directories share one (presence, standby, auth): the
# later compile overwrote the other's, which then missed header changes.
# Named after the whole path instead.
%.o : %.cpp
	@if test ! -d $(DEPDIR); then mkdir -p $(DEPDIR); fi
	$(COMPILE.cc) -o $@ $< -MMD -MP -MF $(DEPDIR)/$(subst /,_,$*).Po

.PHONY: installcheck-temp
installcheck-temp:
	$(MAKE) installcheck EXTRA_REGRESS_OPTS="$(EXTRA_REGRESS_OPTS) $(TEMP_INSTANCE_OPTS)"

# make dist: the PGXN distribution of HEAD, pgbus_stream-<version>.zip.
.PHONY: dist
dist:
	git archive --format zip --prefix=$(EXTENSION)-$(EXTVERSION)/ -o $(EXTENSION)-$(EXTVERSION).zip HEAD
