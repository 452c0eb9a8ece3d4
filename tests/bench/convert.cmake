# bench_convert: V8 CPU profile JSON -> pprof -> the store's zstd frame,
# throughput and peak RSS on synthetic ~1 MB and ~20 MB profiles. A
# measurement, not a test: it is not registered in CTest. Run:
# bench_convert [MB...] (default: 1 20); --write DIR MB... and --file F are
# what tests/bench/convert.js drives. Built from tests/CMakeLists.txt, so it
# lands in build/tests/.
add_executable(bench_convert ${CMAKE_CURRENT_LIST_DIR}/bench_convert.c)
target_link_libraries(bench_convert PRIVATE isoprof_pprof isoprof_storage_internal)
