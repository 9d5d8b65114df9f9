/* harness doctor, probe "openmp": does a plain 2-thread parallel region run here? */
#include <omp.h>
#include <stdio.h>
int main(void) {
    int team = 0;
#pragma omp parallel num_threads(2)
    {
#pragma omp single
        team = omp_get_num_threads();
    }
    printf("team=%d max=%d\n", team, omp_get_max_threads());
    return 0;
}
