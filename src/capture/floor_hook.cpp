// The floor of a hooked queue, published before a statement draws any
// msg_id, without a statement trigger: ExecutorStart (INSERT, MERGE, writable
// CTEs; also inside functions, which start their own executors) and COPY FROM
// (ProcessUtility) look for the queue's AFTER INSERT FOR EACH ROW capture
// trigger among the tables the statement inserts into, and publish the floor
// of its stream. Ids are drawn only when the executor runs (defaults such as
// the identity's nextval are evaluated per row), so this is before the first.
// A BEFORE STATEMENT trigger did the same at about twice the cost of this
// whole hook (docs/ARCHITECTURE.md, "Data path").
//
// Plain PostgreSQL C API only, like the rest of capture: an error here is an
// ordinary statement error and skips no C++ destructor.
#include "capture/capture.hpp"

extern "C" {
#include "postgres.h"
#include "access/relation.h"
#include "catalog/namespace.h"
#include "catalog/pg_trigger.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "fmgr.h"
#include "nodes/parsenodes.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/rel.h"

Datum pgbus_stream_capture(PG_FUNCTION_ARGS);
}

namespace pgbs::capture {
namespace {

ExecutorStart_hook_type prev_executor_start = nullptr;
ProcessUtility_hook_type prev_process_utility = nullptr;

// Whether function fn is pgbus_stream._capture(), whichever schema the
// extension is in; a few answers are remembered (a capture trigger's
// function is one of very few).
bool is_capture_function(Oid fn) {
  static struct {
    Oid fn;
    bool ours;
  } seen[8];
  static int next = 0;
  for (const auto &s : seen)
    if (s.fn == fn && OidIsValid(fn))
      return s.ours;
  FmgrInfo info;
  fmgr_info(fn, &info);
  const bool ours = info.fn_addr == pgbus_stream_capture;
  seen[next++ % 8] = {fn, ours};
  return ours;
}

// As the trigger manager decides whether a trigger fires in this session,
// outside replica role.
bool fires_here(const Trigger *t) {
  return t->tgenabled != TRIGGER_DISABLED && t->tgenabled != TRIGGER_FIRES_ON_REPLICA;
}

// Publishes the floors of the capture triggers of a table rows are about to
// be inserted into. None in replica role: the capture trigger (enabled
// ALWAYS) then takes rows as applied by logical replication, which keep
// their ids and get their floor from the trigger (applied.cpp).
void publish_floors(Relation rel, TriggerDesc *td) {
  if (td == nullptr || !td->trig_insert_after_row ||
      SessionReplicationRole == SESSION_REPLICATION_ROLE_REPLICA)
    return;
  for (int i = 0; i < td->numtriggers; i++) {
    const Trigger *t = &td->triggers[i];
    if (!TRIGGER_FOR_ROW(t->tgtype) || !TRIGGER_FOR_AFTER(t->tgtype) ||
        !TRIGGER_FOR_INSERT(t->tgtype) || t->tgnargs != 1 || !fires_here(t) ||
        !is_capture_function(t->tgfoid))
      continue;
    publish_floor(trigger_stream_id(t->tgoid, t->tgargs[0]), RelationGetRelid(rel), t->tgfoid);
  }
}

void executor_start(QueryDesc *qd, int eflags) {
  if (prev_executor_start)
    prev_executor_start(qd, eflags);
  else
    standard_ExecutorStart(qd, eflags);
  if ((eflags & EXEC_FLAG_EXPLAIN_ONLY) || qd->estate == nullptr)
    return;
  // An UPDATE or DELETE draws no ids (pgmq.read, archive): no floor. A
  // writable CTE may insert anywhere: every table it writes gets its floor.
  const CmdType op = qd->operation;
  if (op != CMD_INSERT && op != CMD_MERGE && !qd->plannedstmt->hasModifyingCTE)
    return;
  ListCell *lc;
  foreach (lc, qd->estate->es_opened_result_relations) {
    ResultRelInfo *rri = (ResultRelInfo *)lfirst(lc);
    publish_floors(rri->ri_RelationDesc, rri->ri_TrigDesc);
  }
}

void process_utility(PlannedStmt *pstmt, const char *query, bool read_only_tree,
                     ProcessUtilityContext context, ParamListInfo params, QueryEnvironment *env,
                     DestReceiver *dest, QueryCompletion *qc) {
  if (IsA(pstmt->utilityStmt, CopyStmt)) {
    const CopyStmt *copy = (const CopyStmt *)pstmt->utilityStmt;
    if (copy->is_from && copy->relation != nullptr) {
      // The lock COPY FROM takes itself, before it checks privileges too.
      Oid relid = RangeVarGetRelid(copy->relation, RowExclusiveLock, true);
      if (OidIsValid(relid)) {
        Relation rel = relation_open(relid, NoLock);
        publish_floors(rel, rel->trigdesc);
        relation_close(rel, NoLock);
      }
    }
  }
  if (prev_process_utility)
    prev_process_utility(pstmt, query, read_only_tree, context, params, env, dest, qc);
  else
    standard_ProcessUtility(pstmt, query, read_only_tree, context, params, env, dest, qc);
}

} // namespace

void install_floor_hooks() {
  prev_executor_start = ExecutorStart_hook;
  ExecutorStart_hook = executor_start;
  prev_process_utility = ProcessUtility_hook;
  ProcessUtility_hook = process_utility;
}

} // namespace pgbs::capture
