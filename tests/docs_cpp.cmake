# The docs' C++ programs, so that they cannot drift from the API. Two modes:
# - included by tests/CMakeLists.txt: at configure time, extracts every ```cpp block of README.md (unless the line
#   before its fence is `<!-- not run: reason -->`) and every ```cpp block of docs/cpp.md whose fence follows a line
#   `<!-- run ... -->` into docs/<file>_<line>.cpp in the build tree, builds each as an executable linked to
#   shmreplay::shmreplay, and registers it with ctest as docs_cpp_<file>_<line> (<line>: the fence's line). Each
#   block must be a whole program (with main). Editing either file re-runs the configure step.
# - run as a script (cmake -DEXE=... -DNAME=... -P docs_cpp.cmake, what those ctest tests do): runs EXE with
#   SHMREPLAY_SHM_DIR set to a fresh directory of its own (so the block's buffer names meet no other test's), and
#   removes the directory afterwards; fails when EXE exits non-zero.
# tests/python/test_docs.py runs the docs' Python blocks and checks the docs' links.

if(CMAKE_SCRIPT_MODE_FILE)
  string(RANDOM LENGTH 8 suffix)
  if(IS_DIRECTORY /dev/shm)
    set(dir /dev/shm/shmreplay-docs-${NAME}-${suffix})
  else()
    set(dir ${CMAKE_CURRENT_BINARY_DIR}/shmreplay-docs-${NAME}-${suffix})
  endif()
  file(MAKE_DIRECTORY ${dir})
  execute_process(COMMAND ${CMAKE_COMMAND} -E env SHMREPLAY_SHM_DIR=${dir} ${EXE}
                  RESULT_VARIABLE rc TIMEOUT 120)
  file(REMOVE_RECURSE ${dir})
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${EXE} (a code block of the docs) exited with ${rc}")
  endif()
  return()
endif()

# shmreplay_docs_cpp(FILE ALL): the blocks of PROJECT_SOURCE_DIR/FILE; ALL: every block unless marked not run,
# else only blocks marked run.
function(shmreplay_docs_cpp doc all)
  set(path ${PROJECT_SOURCE_DIR}/${doc})
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${path})
  file(READ ${path} text)
  string(MAKE_C_IDENTIFIER "${doc}" stem)
  string(REGEX REPLACE "_md$" "" stem "${stem}")
  string(REGEX REPLACE "^docs_" "" stem "${stem}")
  set(fence "```cpp\n")
  set(rest "${text}")
  set(consumed 0)  # characters of text before rest
  while(TRUE)
    string(FIND "${rest}" "${fence}" start)
    if(start EQUAL -1)
      break()
    endif()
    # The line before the fence: its marker, if any.
    string(SUBSTRING "${rest}" 0 ${start} before)
    string(REGEX MATCH "([^\n]*)\n$" previous "${before}")
    set(previous "${CMAKE_MATCH_1}")
    math(EXPR body_start "${start} + 7")
    string(SUBSTRING "${rest}" ${body_start} -1 after)
    string(FIND "${after}" "\n```" end)
    if(end EQUAL -1)
      message(FATAL_ERROR "${doc}: a ```cpp block is not closed")
    endif()
    math(EXPR end_with_newline "${end} + 1")
    string(SUBSTRING "${after}" 0 ${end_with_newline} body)
    # The fence's line number (1-based): the newlines before it, plus one.
    string(SUBSTRING "${text}" 0 ${consumed} head)
    string(APPEND head "${before}")
    string(REGEX MATCHALL "\n" newlines "${head}")
    list(LENGTH newlines line)
    math(EXPR line "${line} + 1")
    set(run ${all})
    if(previous MATCHES "^<!-- not run")
      set(run FALSE)
    elseif(previous MATCHES "^<!-- run")
      set(run TRUE)
    endif()
    if(run)
      set(name docs_cpp_${stem}_${line})
      set(source ${CMAKE_CURRENT_BINARY_DIR}/docs/${stem}_${line}.cpp)
      file(WRITE ${source}.new "// Extracted from ${doc}, line ${line}, by tests/docs_cpp.cmake: edit the doc.\n${body}")
      configure_file(${source}.new ${source} COPYONLY)  # rewritten only when the block changed
      file(REMOVE ${source}.new)
      set_property(GLOBAL APPEND PROPERTY shmreplay_docs_cpp_sources ${source})
      add_executable(${name} ${source})
      target_link_libraries(${name} PRIVATE shmreplay::shmreplay)
      add_test(NAME ${name}
               COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:${name}> -DNAME=${name}
                       -P ${CMAKE_CURRENT_SOURCE_DIR}/docs_cpp.cmake)
      set_tests_properties(${name} PROPERTIES TIMEOUT 180)
      shmreplay_test_component(${name} docs ${name})
    endif()
    math(EXPR skip "${body_start} + ${end} + 4")
    math(EXPR consumed "${consumed} + ${skip}")
    string(SUBSTRING "${rest}" ${skip} -1 rest)
  endwhile()
endfunction()

shmreplay_docs_cpp(README.md TRUE)
shmreplay_docs_cpp(docs/cpp.md FALSE)
# Sources of blocks that moved or went away since the last configure step.
get_property(current GLOBAL PROPERTY shmreplay_docs_cpp_sources)
file(GLOB previous ${CMAKE_CURRENT_BINARY_DIR}/docs/*)
foreach(file ${previous})
  if(NOT file IN_LIST current)
    file(REMOVE ${file})
  endif()
endforeach()
