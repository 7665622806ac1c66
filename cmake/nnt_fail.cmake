# nnt_fail.cmake - a test command that fails with a message: cmake -DNNT_MESSAGE=... -P nnt_fail.cmake
# (used where a test cannot run because something it needs is missing, so that it fails saying so).
message(FATAL_ERROR "${NNT_MESSAGE}")
