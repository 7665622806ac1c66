/* test_main.c - the CUnit runner every suite executable shares. */
#include "test_util.h"

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS) return 2;
    if (register_tests() != 0) {
        fprintf(stderr, "could not register the suites: %s\n", CU_get_error_msg());
        CU_cleanup_registry();
        return 2;
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned failures = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    unsigned run = CU_get_number_of_tests_run();
    CU_cleanup_registry();
    t_tmpdir_finish(failures != 0 || run == 0);
    if (run == 0) {
        fprintf(stderr, "no test ran\n");
        return 1;
    }
    return failures ? 1 : 0;
}
