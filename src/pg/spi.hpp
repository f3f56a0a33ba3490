// A transaction with SPI, for the worker's catalog and table reads. Results
// are copied out as text into plain C++ objects, so nothing returned here
// points into PostgreSQL memory. Errors arrive as pg::Error; the destructor
// aborts a transaction that was not committed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pgbs::pg {

struct Table {
  int ncols = 0;
  std::vector<std::optional<std::string>> cells; // row-major
  size_t rows() const { return ncols ? cells.size() / (size_t)ncols : 0; }
  const std::optional<std::string> &at(size_t row, int col) const {
    return cells[row * ncols + col];
  }
};

// One query argument: a bigint, a bigint[] or a text.
struct Arg {
  enum Kind { Int8, Int8Array, Text } kind;
  int64_t i = 0;
  std::vector<int64_t> ids;
  std::string text;
  static Arg int8(int64_t v) {
    Arg a{Int8};
    a.i = v;
    return a;
  }
  static Arg int8_array(std::vector<int64_t> v) {
    Arg a{Int8Array};
    a.ids = std::move(v);
    return a;
  }
  static Arg txt(std::string v) {
    Arg a{Text};
    a.text = std::move(v);
    return a;
  }
};

// A table by schema and name.
struct TableName {
  std::string schema, table;
};

class SpiTx {
public:
  SpiTx();  // StartTransactionCommand + SPI_connect + snapshot
  ~SpiTx(); // aborts unless commit() ran
  SpiTx(const SpiTx &) = delete;
  SpiTx &operator=(const SpiTx &) = delete;
  // as_role nonzero: the statement runs with that role's rights, as
  // PostgreSQL's VACUUM and REFRESH MATERIALIZED VIEW run a table owner's
  // code: current user the role, inside a security-restricted operation (no
  // SET ROLE, no session authorization, no temporary objects), search_path
  // pg_catalog, pg_temp, and the transaction's statement_timeout armed. The
  // worker's user and every setting the statement changed (even with a
  // session-level SET) are restored after it, also when it fails
  // (docs/ARCHITECTURE.md, "Whose rights").
  Table query(const std::string &sql, const std::vector<Arg> &args = {}, bool read_only = true,
              unsigned as_role = 0);
  // Locks tables (a queue and its archive) until the transaction ends, for
  // reading or (write) for removing rows, and checks that each can be taken
  // as a queue (pg/queue_table.hpp) and that they have one owner: returns
  // that owner, or 0 with *why saying what is wrong.
  unsigned queue_owner(const std::vector<TableName> &tables, bool write, std::string *why);
  // Where query_until() stops: after the row that brings the bytes of text
  // or jsonb column bytes_col (0-based) to max_bytes, or the max_rows-th
  // row, but not before a row whose first column (a bigint) is cover_id or
  // more.
  struct Until {
    int bytes_col = 1;
    size_t max_bytes = 0;
    size_t max_rows = 0;
    int64_t cover_id = 0;
    // A jsonb column here is read as a message (pg/envelope.hpp), detoasted
    // once: its data, event and visible_to cells take its place and its
    // exclude cell comes after the last column. Of another type (a
    // catalog whose row query gives those as text), it is a text cell.
    int envelope_col = -1;
  };
  // A read-only query whose rows are taken one at a time until `until`
  // says stop (*cut: it did; the rows after are not read), so that a page
  // of large rows is held once in the worker, not with every row after it.
  // *last_id: the first column of the last row read. As query() otherwise.
  Table query_until(const std::string &sql, const std::vector<Arg> &args, unsigned as_role,
                    const Until &until, int64_t *last_id, bool *cut);
  void commit();

private:
  bool open_ = false;
  void *outer_ =
      nullptr; // MemoryContext current before the transaction (no PostgreSQL header here)
};

// For a SIGTERM handler: cancels the query of the open SpiTx, if any (it then
// fails with pg::Error); does nothing between transactions.
void cancel_query_from_signal();

// Logs at WARNING without throwing (safe anywhere on the main thread).
void warn(const std::string &msg);
void log(const std::string &msg);

} // namespace pgbs::pg
