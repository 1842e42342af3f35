// The safety of an output directory of `kvec eval` (docs/reliability.md):
//   - DirLock: an exclusive lock (flock) for the whole run; a second run on the same directory
//     gets an error naming the holder (pid, host, start time). The kernel drops the lock when the
//     holder exits, also when it is killed.
//   - RecordAppender: each record is appended with one write(2) on an O_APPEND descriptor; a
//     short or failed write (a full disk) is cut back, so the file only ever holds whole records.
//   - whole files (summaries, metrics, configs) are replaced atomically: util/atomic_file.h.
//   - resuming a run: open_run_dir (config.json's run must match), load_predictions (what is
//     done), InvocationCosts (every invocation's cost, killed ones included).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/sweep.h"

namespace kvec::eval {

class DirLock {
public:
    // Locks `dir` (which must exist) through the file `dir`/.kvec-eval.lock. kvec::Error naming the
    // holder if another process holds it.
    explicit DirLock(const std::string& dir);
    ~DirLock();
    DirLock(const DirLock&) = delete;
    DirLock& operator=(const DirLock&) = delete;

private:
    int fd_ = -1;
};

class RecordAppender {
public:
    explicit RecordAppender(const std::string& path);  // creates the file if needed
    ~RecordAppender();
    RecordAppender(const RecordAppender&) = delete;
    RecordAppender& operator=(const RecordAppender&) = delete;
    // Appends `line` (a newline is added) with one write; kvec::Error if it cannot be written
    // whole, after cutting the file back to where it ended before.
    void append(const std::string& line);

private:
    std::string path_;
    int fd_ = -1;
};

// "pid 1234 on host h, started 2025-01-01T12:00:00Z": what DirLock records of its holder.
std::string lock_holder_description();

// Prepares `out_dir` for a sweep whose configuration is `run` (config.json's "run" object): the
// same run continues (its predictions and costs stay); another one is kvec::Error unless
// `overwrite`, which discards them. A config.json that is not valid JSON is taken as this run's
// (each prediction names its sample, policy and budget). Runs made before the cost files kept
// their totals in metrics.json: they are carried over once. Creates out_dir/invocations.
void open_run_dir(const std::string& out_dir, const nlohmann::ordered_json& run, bool overwrite);

// Reads predictions.jsonl for a resume. A torn last line (a killed write) is dropped; a line that
// is not a valid record (damage from elsewhere) is moved to predictions.jsonl.damaged and a
// repeated record is dropped, and the file is then rewritten atomically without them: a resume
// never needs --overwrite. The dropped samples are run again.
std::vector<EvalRecord> load_predictions(const std::string& path);

// The cost of every invocation of a run: one file per invocation in <out>/invocations/, rewritten
// (atomically) after every record, so that a killed invocation's cost up to its last record is
// kept in the totals.
class InvocationCosts {
public:
    explicit InvocationCosts(const std::string& out_dir);
    void record(const SweepStats& st) const;
    // Sums of every invocation's figures (this one's included once it has recorded), and their
    // count ("invocations").
    nlohmann::json totals() const;

private:
    std::string dir_;
    std::string mine_;  // this invocation's file
};

}  // namespace kvec::eval
