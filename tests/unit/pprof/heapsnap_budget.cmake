# unit.pprof.heapsnap_budget: the daemon's retained conversion
# (heapsnap_retained, as agent/daemon/snapshot.c runs it) of the largest
# snapshot the suite affords, under a hard memory cap.
#
# bench_heapsnap --generate writes a synthetic V8-shaped snapshot of NODES
# nodes (1,300,000: 123 MB of text, past the 120 MB that README.md promises
# to convert within the budget); the conversion then runs under
# `prlimit --as` of BUDGET_MIB (the daemon's AGENT_CONVERT_MEMORY) plus
# SLACK_MIB for the process itself (code, libraries, stack: about 8 MiB of
# address space), so an allocation past the budget fails and the test with
# it. It must be converted, its peak RSS above the process's start within
# the budget; and a budget too small for it must refuse it by its node
# count, with the reason, before it allocates for the nodes.
#
#   cmake -DBENCH=... -DDIR=... -DNODES=... -DBUDGET_MIB=... -DSLACK_MIB=... -P heapsnap_budget.cmake
foreach(v BENCH DIR NODES BUDGET_MIB SLACK_MIB)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "heapsnap_budget.cmake: -D${v}= is required")
  endif()
endforeach()
find_program(PRLIMIT prlimit REQUIRED)
file(REMOVE_RECURSE ${DIR})
file(MAKE_DIRECTORY ${DIR})
set(snap ${DIR}/synthetic.heapsnapshot)

execute_process(COMMAND ${BENCH} --generate ${NODES} ${snap}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "generating the snapshot failed (${rc}): ${out}${err}")
endif()
file(SIZE ${snap} bytes)
if(bytes LESS 120000000)
  message(FATAL_ERROR "the snapshot is ${bytes} bytes, not the 120 MB or more it must be")
endif()
message(STATUS "${NODES} nodes, ${bytes} bytes of snapshot")

math(EXPR cap "(${BUDGET_MIB} + ${SLACK_MIB}) * 1048576")
execute_process(COMMAND ${PRLIMIT} --as=${cap} ${BENCH} --file ${snap} --budget ${BUDGET_MIB}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "under --as=${cap}: ${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the conversion failed under the cap (${rc})")
endif()
if(NOT out MATCHES "converted in [0-9.]+ s: ${NODES} objects")
  message(FATAL_ERROR "the snapshot was not converted within ${BUDGET_MIB} MiB")
endif()
if(NOT out MATCHES "([0-9]+)\\.[0-9] MiB above the process's start")
  message(FATAL_ERROR "no peak in the output")
endif()
if(NOT CMAKE_MATCH_1 LESS BUDGET_MIB)
  message(FATAL_ERROR "the conversion peaked at ${CMAKE_MATCH_1} MiB, past its ${BUDGET_MIB} MiB")
endif()

# A budget too small: refused by node_count, the process still small.
math(EXPR small "${BUDGET_MIB} / 3")
execute_process(COMMAND ${PRLIMIT} --as=${cap} ${BENCH} --file ${snap} --budget ${small}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "within ${small} MiB: ${out}${err}")
if(NOT rc EQUAL 0 OR NOT out MATCHES "refused: snapshot refused \\(too_big\\): snapshot.node_count")
  message(FATAL_ERROR "a budget of ${small} MiB did not refuse it by its node count")
endif()
if(NOT out MATCHES " ([0-9]+)\\.[0-9] MiB above the process's start" OR CMAKE_MATCH_1 GREATER 4)
  message(FATAL_ERROR "the refusal took memory")
endif()
file(REMOVE_RECURSE ${DIR})
