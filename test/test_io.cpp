// test/test_io.cpp: util/io.h's output rules. An output is renamed over its path, so whatever is there must be a
// regular file: a FIFO, a device or (for the rename itself) a symbolic link is refused and left as it was.
#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "util/io.h"

TEST_CASE("an output never replaces a FIFO, a device or a symbolic link at its path", "[io]") {
    char tmpl[] = "/tmp/prism_io_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    const std::string fifo = dir + "/fifo", link = dir + "/link", file = dir + "/file";
    REQUIRE(mkfifo(fifo.c_str(), 0644) == 0);
    REQUIRE(symlink("file", link.c_str()) == 0);
    const char data[] = "x";
    // The check before the work: a FIFO (or a device, /dev/null) is refused, naming it; a regular file is fine.
    CHECK_THROWS_WITH(check_output_file(fifo, "-o"), Catch::Contains(fifo + " is a FIFO, not a regular file"));
    CHECK_THROWS_WITH(check_output_file("/dev/null", "-o"), Catch::Contains("/dev/null is a character device"));
    CHECK_NOTHROW(check_output_file(file, "-o"));
    // The write itself: a FIFO or a link at the path is refused and stays what it was, with no path.tmp left.
    CHECK_THROWS_WITH(write_atomically(fifo, {{data, 1}}), Catch::Contains("is a FIFO"));
    CHECK_THROWS_WITH(write_atomically(link, {{data, 1}}), Catch::Contains("is a symbolic link"));
    struct stat st;
    REQUIRE(lstat(fifo.c_str(), &st) == 0);
    CHECK(S_ISFIFO(st.st_mode));
    REQUIRE(lstat(link.c_str(), &st) == 0);
    CHECK(S_ISLNK(st.st_mode));
    CHECK(access((fifo + ".tmp").c_str(), F_OK) != 0);
    // A regular file (or nothing) is replaced whole.
    write_atomically(file, {{data, 1}});
    REQUIRE(lstat(file.c_str(), &st) == 0);
    CHECK((S_ISREG(st.st_mode) && st.st_size == 1));
    REQUIRE(system(("rm -rf '" + dir + "'").c_str()) == 0);
}
