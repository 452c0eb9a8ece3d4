/*
 * counters.h - the daemon's counters, from one table.
 *
 * Each counter is one row of AGENT_COUNTERS (a scalar) or of
 * AGENT_COUNTER_ARRAYS (one value per kind or reason). From the rows come
 * struct agent_counters, the "counters" object of GET /status and the
 * counter families of GET /metrics (both report.c), and the "counters" line
 * logged at exit (agent_counters_log). Adding a counter is adding a row;
 * nothing else lists them. The /status keys and metric names are an
 * interface (dashboards, alerts, the integration tests): a row's key and
 * metric never change, whatever its field is called.
 *
 * Every counter only ever grows, from 0 at start (reloads keep them). The
 * loop thread owns them; each module increments only its own.
 */
#ifndef ISOPROF_AGENT_COUNTERS_H
#define ISOPROF_AGENT_COUNTERS_H

#include "store.h"

#include <stdint.h>

/* Why an inspector session ended without the agent wanting it to (target.c
 * decides; isoprof_sessions_dropped_total{reason} reports, named by
 * report_drop_name). */
enum agent_drop_reason {
    AGENT_DROP_CLOSED,         /* the target closed it or the connection went away */
    AGENT_DROP_EVICTED,        /* workerd: another client took the isolate's one session */
    AGENT_DROP_PROTOCOL_ERROR, /* invalid JSON or WebSocket framing from the target */
    AGENT_DROP_OVERSIZED,      /* a message over the size cap */
    AGENT_DROP_TIMEOUT,        /* connect and upgrade too slow */
    AGENT_DROP_CONNECT_FAILED, /* refused, or the upgrade answered with an error */
    AGENT_DROP_AGENT,          /* the agent closed it (a call at attach failed) */
    AGENT_DROP_MAX
};

/*
 * The scalar counters: X(field, key, metric, labels, help), in the order
 * of the struct, of /status and of /metrics.
 *   field   the member of struct agent_counters
 *   key     its key in /status's "counters" object and in the exit log
 *   metric  the Prometheus family it is a sample of (type counter), or NULL
 *           when /metrics does not show it by itself (a total that /metrics
 *           shows by label instead)
 *   labels  the sample's label set, "{type=\"cpu\"}", or "" for none
 *   help    the family's HELP text (plain text, no \ or newline), on the
 *           first row of a family; NULL on the rows after it
 * The rows of one family are adjacent: /metrics writes a family's HELP and
 * TYPE when its name differs from the row before.
 */
#define AGENT_COUNTERS(X)                                                                          \
    X(windows_started, "windows_started", "isoprof_windows_started_total", "",                     \
      "CPU windows started (scheduled, anomaly and on-demand).")                                   \
    X(windows_stored, "windows_stored", NULL, "", NULL) /* = windows_stored_<type>, all four */    \
    X(windows_lost, "windows_lost", "isoprof_windows_lost_total", "",                              \
      "Windows started but never received (session gone, call failed, shutdown).")                 \
    X(windows_delayed, "windows_delayed", "isoprof_windows_delayed_total", "",                     \
      "CPU windows that waited for a slot under max_concurrent.")                                  \
    X(windows_skipped, "windows_skipped", "isoprof_windows_skipped_total", "",                     \
      "CPU windows not started (another client was profiling, a call failed).")                    \
    X(windows_deferred, "windows_deferred", "isoprof_windows_deferred_total", "",                  \
      "Scheduled windows (CPU or heap) that waited for the isolate's pause budget.")               \
    X(conversion_errors, "conversion_errors", "isoprof_conversion_errors_total", "",               \
      "Profiles that could not be converted to pprof.")                                            \
    X(store_errors, "store_errors", "isoprof_store_errors_total", "", "Store writes that failed.") \
    X(windows_evicted, "windows_evicted", "isoprof_windows_evicted_total", "",                     \
      "Windows the store evicted to stay within its budget.")                                      \
    X(windows_dropped, "windows_dropped", "isoprof_windows_dropped_total", "",                     \
      "Windows received but not stored (queue full, refused by the store, past "                   \
      "store.pending_max while the store failed).")                                                \
    X(sessions_attached, "sessions_attached", "isoprof_sessions_attached_total", "",               \
      "Inspector sessions attached.")                                                              \
    X(sessions_dropped, "sessions_dropped", NULL, "", NULL) /* = the sum of sessions_dropped_by */ \
    X(threads_attached, "threads_attached", "isoprof_threads_attached_total", "",                  \
      "Worker threads attached (NodeWorker) and profiled as isolates of their own.")               \
    X(threads_detached, "threads_detached", "isoprof_threads_detached_total", "",                  \
      "Worker threads that ended (detachedFromWorker).")                                           \
    X(threads_refused, "threads_refused", "isoprof_threads_refused_total", "",                     \
      "Worker threads released unwatched: over threads.max or the attach rate, or bad ids.")       \
    X(threads_capped, "threads_capped", "isoprof_threads_capped_total", "",                        \
      "Worker announcements past the endpoint's cap (its workers unwatched for a while).")         \
    X(threads_dropped, "threads_dropped", "isoprof_threads_dropped_total", "",                     \
      "Worker threads dropped by the agent (bad messages, a stalled window, a failed attach).")    \
    X(discovery_errors, "discovery_errors", "isoprof_discovery_errors_total", "",                  \
      "Inspector endpoint polls that failed (refused, timed out, bad answer).")                    \
    X(process_scans, "process_scans", "isoprof_process_scans_total", "",                           \
      "Scans of /proc for runtime processes (discovery.processes).")                               \
    X(processes_activated, "processes_activated", "isoprof_processes_activated_total", "",         \
      "Opted-in Node processes sent SIGUSR1 to open their inspector.")                             \
    X(heap_windows, "heap_windows", "isoprof_heap_windows_total", "",                              \
      "Heap windows received (HeapProfiler.getSamplingProfile).")                                  \
    X(heap_restarts, "heap_restarts", "isoprof_heap_sampler_restarts_total", "",                   \
      "Times the heap sampler had been stopped by another client and was restarted.")              \
    X(memory_polls_failed, "memory_polls_failed", "isoprof_memory_polls_failed_total", "",         \
      "Runtime.getHeapUsage calls that failed.")                                                   \
    X(anomaly_errors, "anomaly_errors", "isoprof_anomaly_record_errors_total", "",                 \
      "Anomalies the store could not record.")                                                     \
    X(regression_comparisons, "regression_comparisons", "isoprof_regression_comparisons_total",    \
      "", "Comparisons of a version's CPU aggregate with the one before it (version_regression).") \
    X(regression_extra_windows, "regression_extra_windows",                                        \
      "isoprof_regression_extra_windows_total", "",                                                \
      "CPU windows brought forward so that a new version reaches anomaly.regression.min_samples.") \
    X(regression_errors, "regression_errors", "isoprof_regression_errors_total", "",               \
      "Windows not folded into their version's aggregate, or comparisons not made (a store or "    \
      "profile error).")                                                                           \
    X(windows_stored_cpu, "windows_stored_cpu", "isoprof_windows_stored_total", "{type=\"cpu\"}",  \
      "Windows converted and committed to the store, by type.")                                    \
    X(windows_stored_heap, "windows_stored_heap", "isoprof_windows_stored_total",                  \
      "{type=\"heap\"}", NULL)                                                                     \
    X(windows_stored_retained, "windows_stored_retained", "isoprof_windows_stored_total",          \
      "{type=\"retained\"}", NULL)                                                                 \
    X(windows_stored_snapshot, "windows_stored_snapshot", "isoprof_windows_stored_total",          \
      "{type=\"snapshot\"}", NULL)                                                                 \
    X(control_requests, "control_requests", "isoprof_control_requests_total", "",                  \
      "Requests on the control socket and the metrics listener.")                                  \
    X(control_errors, "control_errors", "isoprof_control_errors_total", "",                        \
      "Control requests answered with an error.")                                                  \
    X(control_rejected_connections, "control_rejected_connections",                                \
      "isoprof_control_rejected_connections_total", "",                                            \
      "Control connections refused or evicted at the connection limit (an idle or slow one "       \
      "gives way to a new one).")                                                                  \
    X(latency_refused, "latency_refused", "isoprof_latency_refused_total", "",                     \
      "DogStatsD latency lines dropped: no room for a new worker/version series (the "             \
      "detector's table full of series seen recently).")

/* What became of a heap snapshot (snapshot.c; isoprof_snapshots_total's
 * result label, named by snapshot_result_name). */
enum snap_result {
    SNAP_STORED,          /* its window committed */
    SNAP_SKIPPED_HEAP,    /* used heap over anomaly.memory.snapshot_max_heap */
    SNAP_SKIPPED_MEMORY,  /* the host's MemAvailable under what V8 would take */
    SNAP_SKIPPED_HELD,    /* its endpoint's last one went past its limit or timed out (1 h) */
    SNAP_DISCARDED,       /* cut off: the target went, a chunk lost, a limit, the store */
    SNAP_FAILED,          /* the target answered an error (or never answered) */
    SNAP_RETAINED_FAILED, /* its retained profile could not be made */
    SNAP_NRESULTS
};

/*
 * The counters kept per kind or reason: X(field, size, first, key, metric,
 * label, name, log_prefix, help), after the scalars in the struct, in
 * /status and in /metrics.
 *   field, size  the member, uint64_t field[size]
 *   first        the first index counted (anomaly kind 0 is "none")
 *   key          its object in /status's "counters", {name(i): value, ...}
 *   metric       the Prometheus family, one sample per index: label="name(i)"
 *   name         const char *name(unsigned i): index i's name (static);
 *                report_drop_name is daemon.h's, so the table is expanded
 *                only where that is included
 *   log_prefix   the exit log's key of index i is log_prefix + name(i)
 *   help         the family's HELP text
 */
#define AGENT_COUNTER_ARRAYS(X)                                                                    \
    X(anomalies, STORE_ANOMALY_MAX + 1, 1, "anomalies", "isoprof_anomalies_total", "kind",         \
      store_anomaly_name, "", "Anomaly episodes flagged, by kind.")                                \
    X(sessions_dropped_by, AGENT_DROP_MAX, 0, "sessions_dropped_by",                               \
      "isoprof_sessions_dropped_total", "reason", report_drop_name, "sessions_dropped_",           \
      "Inspector sessions that ended without the agent wanting it, by reason.")                    \
    X(snapshots, SNAP_NRESULTS, 0, "snapshots", "isoprof_snapshots_total", "result",               \
      snapshot_result_name, "snapshots_",                                                          \
      "Heap snapshots (anomaly.memory.snapshot) by outcome, and retained profiles that failed.")

/* Counters the daemon reports (see above). Zeroed at start. */
struct agent_counters {
#define AGENT_COUNTER_FIELD(field, key, metric, labels, help) uint64_t field;
#define AGENT_COUNTER_ARRAY_FIELD(field, size, first, key, metric, label, name, log_prefix, help)  \
    uint64_t field[size];
    AGENT_COUNTERS(AGENT_COUNTER_FIELD)
    AGENT_COUNTER_ARRAYS(AGENT_COUNTER_ARRAY_FIELD)
#undef AGENT_COUNTER_FIELD
#undef AGENT_COUNTER_ARRAY_FIELD
};

/*
 * agent_counters_log - log every counter of n at info level, as one
 * "counters" line of key=value pairs (more lines, each "counters", if they
 * ever outgrow a log line): the scalars by key, then each array's indexes
 * by log_prefix + name. n is borrowed for the call. Loop thread (the
 * logger's); the daemon calls it once, at exit.
 */
void agent_counters_log(const struct agent_counters *n);

#endif
