// tests/support/pch.cpp: the translation unit that builds the precompiled
// header the tests, properties and mutants reuse (tests/CMakeLists.txt,
// dmref_test_pch). Empty: the header list is in the CMake target.
