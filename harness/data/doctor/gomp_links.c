/* harness doctor, probe "tool:gcc": compiled with -fopenmp, this only links if libgomp is there */
int main(void) { return 0; }
