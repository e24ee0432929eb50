# The exercises' builds and their honesty tests (lessons/NN_name/exercise/, exercise/README.md
# of each lesson, TEACHING.md). One call per lesson:
#
#   pa_add_exercise(LESSON lesson01 ARCHS <archs> HARNESS <library> MAIN exercise/harness/graded_main.cu
#     GRADED  fill=student.cuh window=window.cuh                # the files a student edits
#     ANSWERS fill=lesson_fill.cuh window=solution/window.cuh   # the lesson's step, the solutions
#     SKELETON_FAILS "fill=RESULT: FAIL" "window=the window is not applied"
#     [ANSWER_RATIO 0.8,1.25]     # the answer of exercise `fill` (the lesson's step against itself) times here
#     [SOLUTION_RATIO 0.5,1.2]    # the extensions' solutions (other code than the lesson's) time here
#     [MUTANTS fill_zeros ...]    # exercise/mutants/<name>.cuh; the exercise is the name up to '_'
#     [CPU_EXERCISES plan]        # exercises graded without a GPU: their tests are CPU tests
#     [CLI_BAD "--seed x|--frobnicate"])  # command lines the grader must refuse (exit 2)
#
# Every graded file reaches MAIN as a compile definition PA_EXERCISE_<EXERCISE>="<file>" (its
# path relative to exercise/, which is on the include path), with PA_EXERCISE_BUILD naming the
# build. Executables:
#   <lesson>_exercise            the GRADED files (the student's)
#   <lesson>_exercise_reference  the ANSWERS: passes every check at a speed ratio near 1
#   <lesson>_exercise_mutant_<m> one known-wrong file; its header says what the grader must print:
#                                "// The grader must fail it (exit code N) and print (a regular expression): ..."
#   <lesson>_exercise_submission with -DPA_EXERCISE_SUBMISSION=<lesson>/<exercise>=<file>: that file
#                                alone (scripts/grade_class.sh grades a class this way)
# The student's and the answers' builds compile for ARCHS; each mutant, which is only checked,
# for the lowest of them (the driver JIT-compiles its PTX on a newer GPU), to keep CI lean. The
# answers, the mutants and the tests exist only with PA_BUILD_TESTS.
#
# Honesty tests (tests/CMakeLists.txt reads the global properties): the untouched skeletons fail
# with SKELETON_FAILS, every mutant fails as its header says, the answers pass; and a CLI test:
# --help exits 0, each CLI_BAD line exits 2 with one line, and without a GPU a GPU exercise exits 3.
set(PA_EXERCISE_SUBMISSION "" CACHE STRING
    "<lesson>/<exercise>=<file>: build <lesson>_exercise_submission, grading that file (scripts/grade_class.sh)")

function(pa_exercise_honesty name exe exercise rc expect ratio labels)
  set_property(GLOBAL APPEND PROPERTY PA_EXERCISE_HONESTY ${name})
  set_property(GLOBAL PROPERTY PA_EXERCISE_HONESTY_${name}
               "EXE=${exe}" "EXERCISE=${exercise}" "RC=${rc}" "EXPECT=${expect}" "RATIO=${ratio}" "LABELS=${labels}" ${ARGN})
endfunction()

# A mutant file (exercise/mutants/<name>.mutant) is a known-wrong answer written as the graded
# file it is made from plus the changes that make it wrong, so that it shows only its mistake:
#
#   // <what it gets wrong, and why the grader must catch it>
#   // The grader must fail it (exit code N) and print (a regular expression): <regex>
#   //
#   // This mutant is <base file, relative to exercise/> with the changes below (cmake/exercise.cmake applies them).
#   @@ replace
#   <lines of the base file, which must occur in it exactly once>
#   @@ with
#   <the lines that replace them>
#   @@ end
#   ... (more blocks)
#
# pa_exercise_mutant(<exercise dir> <mutant file> <output file> <rc var> <expect var>) writes the
# mutant's graded file: its header comment, then the base file after its own header comment, with
# every block applied in order. A block whose lines do not occur exactly once stops the configure.
function(pa_exercise_mutant dir file out rc_var expect_var)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${dir}/${file})
  file(READ ${dir}/${file} text)
  string(REGEX MATCH "// The grader must fail it \\(exit code ([0-9]+)\\) and print \\(a regular expression\\): ([^\n]+)" _ "${text}")
  if(NOT CMAKE_MATCH_1)
    message(FATAL_ERROR "${dir}/${file}: its header does not say what the grader must print")
  endif()
  set(${rc_var} ${CMAKE_MATCH_1} PARENT_SCOPE)
  set(${expect_var} "${CMAKE_MATCH_2}" PARENT_SCOPE)
  string(FIND "${text}" "\n//\n// This mutant is " header_end)
  string(REGEX MATCH "// This mutant is ([^ \n]+) with the changes below" _ "${text}")
  if(header_end EQUAL -1 OR NOT CMAKE_MATCH_1)
    message(FATAL_ERROR "${dir}/${file}: no line '// This mutant is <file> with the changes below'")
  endif()
  set(base ${CMAKE_MATCH_1})
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${dir}/${base})
  math(EXPR header_end "${header_end} + 1")
  string(SUBSTRING "${text}" 0 ${header_end} header)
  # The base file after its own header comment (its leading lines that start with //).
  file(READ ${dir}/${base} body)
  while(body MATCHES "^//")
    string(FIND "${body}" "\n" eol)
    math(EXPR eol "${eol} + 1")
    string(SUBSTRING "${body}" ${eol} -1 body)
  endwhile()
  # The blocks, in order.
  string(FIND "${text}" "@@ replace\n" at)
  while(NOT at EQUAL -1)
    math(EXPR at "${at} + 11")
    string(SUBSTRING "${text}" ${at} -1 text)
    string(FIND "${text}" "@@ with\n" with_at)
    string(FIND "${text}" "@@ end\n" end_at)
    if(with_at EQUAL -1 OR end_at EQUAL -1 OR end_at LESS with_at)
      message(FATAL_ERROR "${dir}/${file}: a '@@ replace' block without its '@@ with' and '@@ end'")
    endif()
    string(SUBSTRING "${text}" 0 ${with_at} old)
    math(EXPR new_at "${with_at} + 8")
    math(EXPR new_len "${end_at} - ${new_at}")
    string(SUBSTRING "${text}" ${new_at} ${new_len} new)
    string(FIND "${body}" "${old}" first)
    string(FIND "${body}" "${old}" last REVERSE)
    if(first EQUAL -1 OR NOT first EQUAL last OR old STREQUAL "")
      message(FATAL_ERROR "${dir}/${file}: the lines of a '@@ replace' block do not occur exactly once in ${base}:\n${old}")
    endif()
    string(LENGTH "${old}" old_len)
    math(EXPR after "${first} + ${old_len}")
    string(SUBSTRING "${body}" 0 ${first} before)
    string(SUBSTRING "${body}" ${after} -1 rest)
    set(body "${before}${new}${rest}")
    math(EXPR end_at "${end_at} + 7")
    string(SUBSTRING "${text}" ${end_at} -1 text)
    string(FIND "${text}" "@@ replace\n" at)
  endwhile()
  file(WRITE ${out}.tmp "${header}${body}")
  file(COPY_FILE ${out}.tmp ${out} ONLY_IF_DIFFERENT)
  file(REMOVE ${out}.tmp)
endfunction()

function(pa_add_exercise)
  cmake_parse_arguments(E "" "LESSON;HARNESS;MAIN;ANSWER_RATIO;SOLUTION_RATIO;CLI_BAD"
                        "ARCHS;GRADED;ANSWERS;SKELETON_FAILS;MUTANTS;CPU_EXERCISES" ${ARGN})
  list(GET E_ARCHS 0 lowest)

  # <exe> <build name> <archs> key=file...
  function(pa_exercise_executable exe build archs)
    add_executable(${exe} ${E_MAIN})
    target_include_directories(${exe} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/exercise)
    target_link_libraries(${exe} PRIVATE ${E_HARNESS})
    target_compile_definitions(${exe} PRIVATE "PA_EXERCISE_BUILD=\"${build}\"")
    foreach(pair IN LISTS ARGN)
      if(NOT pair MATCHES "^([a-z0-9]+)=(.+)$")
        message(FATAL_ERROR "${E_LESSON} exercise: '${pair}' is not <exercise>=<file>")
      endif()
      string(TOUPPER ${CMAKE_MATCH_1} key)
      target_compile_definitions(${exe} PRIVATE "PA_EXERCISE_${key}=\"${CMAKE_MATCH_2}\"")
    endforeach()
    set_target_properties(${exe} PROPERTIES CUDA_ARCHITECTURES "${archs}")
  endfunction()

  # The labels of an exercise's tests: CPU tests when it is graded without a GPU.
  macro(pa_exercise_labels exercise out)
    if("${exercise}" IN_LIST E_CPU_EXERCISES)
      set(${out} "cpu,exercise")
    else()
      set(${out} "gpu,exercise")
    endif()
  endmacro()

  pa_exercise_executable(${E_LESSON}_exercise "student" "${E_ARCHS}" ${E_GRADED})
  if(PA_EXERCISE_SUBMISSION MATCHES "^${E_LESSON}/([a-z0-9]+)=(.+)$")
    get_filename_component(file "${CMAKE_MATCH_2}" ABSOLUTE)
    pa_exercise_executable(${E_LESSON}_exercise_submission "submission ${file}" "${E_ARCHS}" "${CMAKE_MATCH_1}=${file}")
  endif()
  if(NOT PA_BUILD_TESTS)
    return()  # the answers' and the mutants' builds exist for the honesty tests
  endif()
  pa_exercise_executable(${E_LESSON}_exercise_reference "lesson + solution" "${E_ARCHS}" ${E_ANSWERS})
  foreach(pair IN LISTS E_SKELETON_FAILS)
    string(REGEX MATCH "^([a-z0-9]+)=(.*)$" _ "${pair}")
    set(exercise ${CMAKE_MATCH_1})
    pa_exercise_labels(${exercise} labels)
    pa_exercise_honesty(${E_LESSON}.skeleton.${exercise} ${E_LESSON}_exercise ${exercise} 1 "${CMAKE_MATCH_2}" "" "${labels}")
  endforeach()
  foreach(pair IN LISTS E_ANSWERS)
    string(REGEX MATCH "^([a-z0-9]+)=" _ "${pair}")
    set(exercise ${CMAKE_MATCH_1})
    pa_exercise_labels(${exercise} labels)
    if(exercise STREQUAL "fill")
      set(ratio "${E_ANSWER_RATIO}")
    else()
      set(ratio "${E_SOLUTION_RATIO}")
    endif()
    if("${exercise}" IN_LIST E_CPU_EXERCISES)
      set(ratio "")  # graded without a GPU: no speed
    endif()
    pa_exercise_honesty(${E_LESSON}.answer.${exercise} ${E_LESSON}_exercise_reference ${exercise} 0 "RESULT: PASS"
                        "${ratio}" "${labels}")
  endforeach()
  foreach(mutant IN LISTS E_MUTANTS)
    string(REGEX MATCH "^[a-z0-9]+" exercise ${mutant})
    pa_exercise_mutant(${CMAKE_CURRENT_SOURCE_DIR}/exercise mutants/${mutant}.mutant
                       ${CMAKE_CURRENT_BINARY_DIR}/exercise/mutants/${mutant}.cuh rc expect)
    pa_exercise_executable(${E_LESSON}_exercise_mutant_${mutant} "mutant ${mutant}" "${lowest}"
                           "${exercise}=${CMAKE_CURRENT_BINARY_DIR}/exercise/mutants/${mutant}.cuh")
    pa_exercise_labels(${exercise} labels)
    set(extra "")
    if(rc EQUAL 4)
      set(extra --timeout 3)  # a hang: no need to wait the default 10 s
    endif()
    pa_exercise_honesty(${E_LESSON}.mutant.${mutant} ${E_LESSON}_exercise_mutant_${mutant} ${exercise} ${rc} "${expect}" ""
                        "${labels}" ${extra})
  endforeach()

  # The first exercise that needs a GPU: the CLI test checks that it exits 3 without one.
  set(gpu_exercise "")
  foreach(pair IN LISTS E_GRADED)
    string(REGEX MATCH "^([a-z0-9]+)=" _ "${pair}")
    if(NOT gpu_exercise AND NOT "${CMAKE_MATCH_1}" IN_LIST E_CPU_EXERCISES)
      set(gpu_exercise ${CMAKE_MATCH_1})
    endif()
  endforeach()
  set_property(GLOBAL APPEND PROPERTY PA_EXERCISE_CLI ${E_LESSON})
  set_property(GLOBAL PROPERTY PA_EXERCISE_CLI_${E_LESSON} "${E_LESSON}_exercise" "${E_CLI_BAD}" "${gpu_exercise}")

endfunction()
