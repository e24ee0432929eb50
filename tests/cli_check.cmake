# A lesson program's command line, checked without a GPU (everything here is decided before
# the program looks for one):
#   --help exits 0 and names every variant: the names the program itself lists when it
#          refuses an unknown --variant, so a hand-written help that misses one fails;
#   each bad command line in BAD ('|' between command lines) exits 2 with one line on stderr.
#
#   cmake -DEXE=<program> "-DBAD=--iters 0|--frobnicate" -P cli_check.cmake
if(NOT EXE)
  message(FATAL_ERROR "cli_check.cmake: pass -DEXE=<program>")
endif()

execute_process(COMMAND ${EXE} --help RESULT_VARIABLE rc OUTPUT_VARIABLE help ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${EXE} --help exited ${rc} (expected 0): ${err}")
endif()

execute_process(COMMAND ${EXE} --variant no-such-variant RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "${EXE} --variant no-such-variant exited ${rc} (expected 2): ${err}")
endif()
string(REGEX MATCH "this lesson has: ([^)]*)\\)" listed "${err}")
if(NOT listed)
  message(FATAL_ERROR "${EXE} --variant no-such-variant does not list the variants: ${err}")
endif()
string(REPLACE ", " ";" names "${CMAKE_MATCH_1}")
list(LENGTH names count)
if(count LESS 2)
  message(FATAL_ERROR "${EXE} lists ${count} variant(s): '${CMAKE_MATCH_1}'")
endif()
foreach(name IN LISTS names)
  string(FIND "${help}" " ${name}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${EXE} --help does not name the variant '${name}':\n${help}")
  endif()
endforeach()

string(REPLACE "|" ";" bad_lines "${BAD}")
foreach(line IN LISTS bad_lines)
  separate_arguments(args UNIX_COMMAND "${line}")
  execute_process(COMMAND ${EXE} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 2)
    message(FATAL_ERROR "${EXE} ${line}: exited ${rc} (expected 2 for invalid input)\nstdout: ${out}\nstderr: ${err}")
  endif()
  string(STRIP "${err}" err)
  if(err STREQUAL "" OR err MATCHES "\n" OR NOT err MATCHES "^error: ")
    message(FATAL_ERROR "${EXE} ${line}: expected one line 'error: ...' on stderr, got:\n${err}")
  endif()
  message(STATUS "${line}: ${err}")
endforeach()
message(STATUS "${EXE}: --help names ${count} variants; ${BAD} refused with exit code 2")
